package archivebinding

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/archivefinding"
)

// RecordFinding records finding in the binding to archive, or clears it
// when finding is nil; a binding with the same finding is left as it is,
// and so is a binding to another archive, or none.
func RecordFinding(ctx context.Context, c client.Client, namespace, archive string, finding *archivefinding.Finding) error {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, Key(namespace), &cm); err != nil {
		return fmt.Errorf("cannot read the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	b, err := fromConfigMap(&cm)
	if err != nil || b.Archive != archive {
		return err
	}
	if (b.Behind == nil && finding == nil) || (b.Behind != nil && finding != nil && b.Behind.Digest == finding.Digest) {
		return nil
	}
	b.Behind = finding
	b.writeTo(&cm)
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("cannot record in the archive binding (ConfigMap %s) what the archive is behind: %w", Key(namespace), err)
	}
	return nil
}
