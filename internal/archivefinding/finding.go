// Package archivefinding is what the managers found of an archive gone
// behind the records that left etcd for it, as the archive binding keeps it
// for people (kubectl toolledger archive status) and an acknowledgement
// names it by its digest.
package archivefinding

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Where the archive binding keeps the finding: the key of its ConfigMap, in
// the operator's namespace.
const (
	BindingConfigMap = "toolledger-archive"
	BindingKey       = "behind"
)

// Finding is what the managers found of the archive going behind the
// cluster's marks: the namespaces whose chain it no longer holds as far as
// their records left etcd. Kept in the binding for people
// (kubectl toolledger archive status), and acknowledged by its digest.
type Finding struct {
	// Archive is the archive's identity.
	Archive string `json:"archive"`
	// Digest names the finding: the archive and each namespace's mark and
	// head, the same whichever manager found it, and whenever.
	Digest string `json:"digest"`
	// DetectedAt and DetectedBy say when and which manager found it first.
	DetectedAt time.Time `json:"detectedAt"`
	DetectedBy string    `json:"detectedBy"`
	// Namespaces are the namespaces behind, in order.
	Namespaces []BehindNamespace `json:"namespaces"`
}

// BehindNamespace is one namespace's chain that the archive no longer holds.
type BehindNamespace struct {
	Namespace string `json:"namespace"`
	// MarkSequence and MarkHash are the cluster's mark, the newest link
	// whose record left etcd, and MarkTime when it was written;
	// HeadSequence and HeadHash the chain's head in the archive.
	MarkSequence int64     `json:"markSequence"`
	MarkHash     string    `json:"markHash"`
	MarkTime     time.Time `json:"markTime"`
	HeadSequence int64     `json:"headSequence"`
	HeadHash     string    `json:"headHash"`
}

// New is the finding of archive behind in namespaces, found at at by
// detector, with its digest.
func New(archive string, namespaces []BehindNamespace, at time.Time, detector string) *Finding {
	namespaces = slices.Clone(namespaces)
	slices.SortFunc(namespaces, func(a, b BehindNamespace) int { return strings.Compare(a.Namespace, b.Namespace) })
	sum := sha256.New()
	fmt.Fprintf(sum, "archive %s\n", archive)
	for _, n := range namespaces {
		fmt.Fprintf(sum, "%s %d %s %d %s\n", n.Namespace, n.MarkSequence, n.MarkHash, n.HeadSequence, n.HeadHash)
	}
	return &Finding{Archive: archive, Digest: "sha256:" + hex.EncodeToString(sum.Sum(nil)), DetectedAt: at.UTC().Truncate(time.Second),
		DetectedBy: detector, Namespaces: namespaces}
}

// Summary names the namespaces behind, and what the archive lost of each:
// "shop (records 11 to 20)".
func (f *Finding) Summary() string {
	parts := make([]string, 0, len(f.Namespaces))
	for _, n := range f.Namespaces {
		parts = append(parts, n.Namespace+" ("+n.Lost()+")")
	}
	return strings.Join(parts, ", ")
}

// Lost says which records of the namespace's chain the archive lost.
func (n BehindNamespace) Lost() string {
	if n.HeadSequence >= n.MarkSequence {
		return fmt.Sprintf("records up to %d, some replaced by others archived since", n.MarkSequence)
	}
	return fmt.Sprintf("records %d to %d", n.HeadSequence+1, n.MarkSequence)
}
