package chainstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/archive"
)

// A namespace's mark is the newest link of its archived chain whose record
// may have left etcd. It is written before the etcd delete of the records
// it covers, and only moves forward: an archive that does not hold it lost
// records that nothing else keeps. It lives apart from the chain's state,
// in a small ConfigMap of its own, since it is written as often as records
// retire.

// MarkKey is where the mark of namespace's chain is kept.
func MarkKey(operatorNamespace, namespace string) types.NamespacedName {
	return types.NamespacedName{Namespace: operatorNamespace, Name: "toolledger-mark-" + namespace}
}

const markKey = "mark"

// ReadMark reads the mark of namespace's chain; the zero Point when the
// cluster keeps none.
func ReadMark(ctx context.Context, reader client.Reader, operatorNamespace, namespace string) (Point, error) {
	var cm corev1.ConfigMap
	if err := reader.Get(ctx, MarkKey(operatorNamespace, namespace), &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Point{}, nil
		}
		return Point{}, fmt.Errorf("cannot read the mark of namespace %s's chain: %w", namespace, err)
	}
	return decodeMark(&cm)
}

func decodeMark(cm *corev1.ConfigMap) (Point, error) {
	var p Point
	if raw := cm.Data[markKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return Point{}, fmt.Errorf("ConfigMap %s/%s does not hold a chain's mark: %w", cm.Namespace, cm.Name, err)
		}
	}
	return p, nil
}

// Marks reads the marks of every namespace's chain that reader (the
// manager's cache of the operator namespace's ConfigMaps) has.
func Marks(ctx context.Context, reader client.Reader, operatorNamespace string) (map[string]Point, error) {
	var list corev1.ConfigMapList
	if err := reader.List(ctx, &list, client.InNamespace(operatorNamespace), client.HasLabels{LabelMark}); err != nil {
		return nil, fmt.Errorf("cannot list the marks of the archive's chains: %w", err)
	}
	marks := make(map[string]Point, len(list.Items))
	for i := range list.Items {
		cm := &list.Items[i]
		p, err := decodeMark(cm)
		if err != nil {
			return nil, err
		}
		if p.Sequence > 0 {
			marks[cm.Labels[LabelMark]] = p
		}
	}
	return marks, nil
}

// LabelMark marks a chain's mark with the namespace it is of.
const LabelMark = "toolledger.dev/archive-mark"

// ErrMarkBehind is Cover's answer when the archive does not hold the mark
// the cluster keeps: it went back.
var ErrMarkBehind = errors.New("the archive does not hold the chain's mark")

// Holder tells whether the archive holds marks: *archive.Store.
type Holder interface {
	Holds(ctx context.Context, marks map[string]archive.Link) (map[string]archive.Holding, error)
}

// Marker moves the namespaces' marks forward as their records leave etcd:
// Cover returns once the mark covers a record's link. Those that wait while
// a namespace's mark is written share the next write, so that records
// retiring at once cost one write of it, not one each.
type Marker struct {
	// Reader reads the marks (the manager's cache); a write that conflicts
	// reads the mark again from APIReader.
	Reader, APIReader client.Reader
	Client            client.Client
	Archive           Holder
	OperatorNamespace string

	mu      sync.Mutex
	writers map[string]*markWriter
}

// markWriter writes one namespace's mark, one write at a time.
type markWriter struct {
	// mu is held while the mark is written; wanted is the newest link
	// asked for, under Marker.mu.
	mu     sync.Mutex
	wanted archive.Link
	// written is the mark as this replica last wrote it, or found it
	// held by the archive.
	written archive.Link
}

// Mark is namespace's mark as the cache has it: what a key check and a keep
// ask the archive to hold.
func (m *Marker) Mark(ctx context.Context, namespace string) (archive.Link, error) {
	p, err := ReadMark(ctx, m.Reader, m.OperatorNamespace, namespace)
	return p.Link(), err
}

// Cover returns once namespace's mark covers link, the link of a record
// the archive keeps: the record may then leave etcd.
func (m *Marker) Cover(ctx context.Context, namespace string, link archive.Link) error {
	if link.Sequence == 0 {
		return nil // archived before the archive had chains: nothing to mark
	}
	m.mu.Lock()
	if m.writers == nil {
		m.writers = map[string]*markWriter{}
	}
	w := m.writers[namespace]
	if w == nil {
		w = &markWriter{}
		m.writers[namespace] = w
	}
	if link.Sequence > w.wanted.Sequence {
		w.wanted = link
	}
	m.mu.Unlock()

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written.Sequence >= link.Sequence {
		return nil // a write that waiters shared covered it
	}
	m.mu.Lock()
	target := w.wanted
	m.mu.Unlock()
	written, err := m.write(ctx, namespace, target, w.written)
	if err != nil {
		return err
	}
	w.written = written
	return nil
}

// write moves namespace's mark forward to target, unless it is there or
// beyond already, and returns the mark as written. A mark written by
// another replica since verified, the last this one wrote, must still be
// held by the archive: target then follows it on the chain.
func (m *Marker) write(ctx context.Context, namespace string, target, verified archive.Link) (archive.Link, error) {
	key := MarkKey(m.OperatorNamespace, namespace)
	reader := m.Reader
	for attempt := 0; ; attempt++ {
		var cm corev1.ConfigMap
		err := reader.Get(ctx, key, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return archive.Link{}, fmt.Errorf("cannot read the mark of namespace %s's chain: %w", namespace, err)
		}
		current, err := decodeMark(&cm)
		if err != nil {
			return archive.Link{}, err
		}
		if current.Sequence >= target.Sequence {
			return current.Link(), nil
		}
		if current.Sequence > 0 && current.Link() != verified {
			if err := m.held(ctx, namespace, current.Link()); err != nil {
				return archive.Link{}, err
			}
			verified = current.Link()
		}
		raw, err := json.Marshal(Point{Sequence: target.Sequence, Hash: target.Hash, Time: metav1.NewTime(time.Now().UTC().Truncate(time.Second))})
		if err != nil {
			return archive.Link{}, err
		}
		if create {
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{LabelMark: namespace, "app.kubernetes.io/part-of": "toolledger"}}}
		}
		cm.Data = map[string]string{markKey: string(raw)}
		if create {
			err = m.Client.Create(ctx, &cm)
		} else {
			err = m.Client.Update(ctx, &cm)
		}
		switch {
		case err == nil:
			return target, nil
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5:
			reader = m.APIReader // another replica moved it: read it as it is
		default:
			return archive.Link{}, fmt.Errorf("cannot write the mark of namespace %s's chain: %w", namespace, err)
		}
	}
}

// held checks that the archive holds mark, namespace's.
func (m *Marker) held(ctx context.Context, namespace string, mark archive.Link) error {
	holdings, err := m.Archive.Holds(ctx, map[string]archive.Link{namespace: mark})
	if err != nil {
		return err
	}
	if err := holdings[namespace].Behind(namespace, mark); err != nil {
		return fmt.Errorf("%w: %w", ErrMarkBehind, err)
	}
	return nil
}

// Reset moves namespace's mark back to head, the head the archive holds,
// when it is still mark: an operator acknowledged that the archive lost
// the records after head. It reports whether it moved it.
func (m *Marker) Reset(ctx context.Context, namespace string, mark, head archive.Link) (bool, error) {
	key := MarkKey(m.OperatorNamespace, namespace)
	var cm corev1.ConfigMap
	if err := m.APIReader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cannot read the mark of namespace %s's chain: %w", namespace, err)
	}
	current, err := decodeMark(&cm)
	if err != nil || current.Link() != mark {
		return false, err
	}
	raw, err := json.Marshal(Point{Sequence: head.Sequence, Hash: head.Hash, Time: metav1.NewTime(time.Now().UTC().Truncate(time.Second))})
	if err != nil {
		return false, err
	}
	cm.Data = map[string]string{markKey: string(raw)}
	if err := m.Client.Update(ctx, &cm); err != nil {
		return false, fmt.Errorf("cannot move the mark of namespace %s's chain back to the archive's head: %w", namespace, err)
	}
	m.mu.Lock()
	if w := m.writers[namespace]; w != nil {
		w.wanted = archive.Link{}
		m.mu.Unlock()
		w.mu.Lock()
		w.written = head
		w.mu.Unlock()
	} else {
		m.mu.Unlock()
	}
	return true, nil
}
