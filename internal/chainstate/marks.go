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

// newMark is the ConfigMap of namespace's mark, before it holds one.
func newMark(operatorNamespace, namespace string) corev1.ConfigMap {
	key := MarkKey(operatorNamespace, namespace)
	return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{LabelMark: namespace, "app.kubernetes.io/part-of": "toolledger"}}}
}

// setMark sets cm's mark to p.
func setMark(cm *corev1.ConfigMap, p Point) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	cm.Data = map[string]string{markKey: string(raw)}
	return nil
}

// reachedNow is link as a mark that reached it now.
func reachedNow(link archive.Link) Point {
	return Point{Sequence: link.Sequence, Hash: link.Hash, Time: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}
}

// ErrMarkBehind is Cover's answer when the archive does not hold the mark
// the cluster keeps: it went back.
var ErrMarkBehind = errors.New("the archive does not hold the chain's mark")

// Holder tells whether the archive holds marks: *archive.Store.
type Holder interface {
	Holds(ctx context.Context, marks map[string]archive.Link) (map[string]archive.Holding, error)
}

// Marker moves the namespaces' marks forward as their records leave etcd:
// Cover returns once the mark covers a record's link. Those that ask while
// a namespace's mark is being written join the next write, so that records
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

// markWriter writes one namespace's mark, one write at a time; the links
// asked for meanwhile wait in the next batch.
type markWriter struct {
	// writing is held by the batch that writes; next collects the links
	// asked for meanwhile, under Marker.mu.
	writing chan struct{}
	next    *markBatch
	// verified is a mark this replica wrote, or found the archive holding,
	// under writing: a write that finds it current need not ask the
	// archive again.
	verified archive.Link
}

// markBatch is one write of a mark, for the newest link its callers asked.
type markBatch struct {
	want archive.Link
	done chan struct{}
	err  error
}

// Mark is namespace's mark as the cache has it: what a key check and a keep
// ask the archive to hold.
func (m *Marker) Mark(ctx context.Context, namespace string) (archive.Link, error) {
	p, err := ReadMark(ctx, m.Reader, m.OperatorNamespace, namespace)
	return p.Link(), err
}

// Cover returns once namespace's mark covers link, the link of a record
// the archive kept against the mark the cache has now: the record may then
// leave etcd. A mark the cache has at or past link covers it: the cache
// gives the marks in the order they were written, and the keep checked that
// the archive held the one it read, so a later one is of the same chain.
func (m *Marker) Cover(ctx context.Context, namespace string, link archive.Link) error {
	if link.Sequence == 0 {
		return nil // archived before the archive had chains: nothing to mark
	}
	if current, err := m.Mark(ctx, namespace); err == nil && current.Sequence >= link.Sequence {
		return nil
	}
	m.mu.Lock()
	if m.writers == nil {
		m.writers = map[string]*markWriter{}
	}
	w := m.writers[namespace]
	if w == nil {
		w = &markWriter{writing: make(chan struct{}, 1)}
		m.writers[namespace] = w
	}
	b, lead := w.next, false
	if b == nil {
		b, lead = &markBatch{done: make(chan struct{})}, true
		w.next = b
	}
	if link.Sequence > b.want.Sequence {
		b.want = link
	}
	m.mu.Unlock()
	if !lead {
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The batch's leader waits for the write before it, then closes the
	// batch to newcomers and writes the newest link asked.
	select {
	case w.writing <- struct{}{}:
	case <-ctx.Done():
		m.mu.Lock()
		if w.next == b {
			w.next = nil
		}
		m.mu.Unlock()
		b.err = ctx.Err()
		close(b.done)
		return b.err
	}
	m.mu.Lock()
	if w.next == b {
		w.next = nil
	}
	target := b.want
	m.mu.Unlock()
	b.err = m.write(ctx, namespace, target, w)
	<-w.writing
	close(b.done)
	return b.err
}

// write moves namespace's mark forward to target, unless it is there or
// beyond already. A mark another replica wrote, or one moved back by an
// acknowledgement, must still be held by the archive before it is moved
// past: target then follows it on the chain.
func (m *Marker) write(ctx context.Context, namespace string, target archive.Link, w *markWriter) error {
	key := MarkKey(m.OperatorNamespace, namespace)
	reader := m.Reader
	for attempt := 0; ; attempt++ {
		var cm corev1.ConfigMap
		err := reader.Get(ctx, key, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return fmt.Errorf("cannot read the mark of namespace %s's chain: %w", namespace, err)
		}
		current, err := decodeMark(&cm)
		if err != nil {
			return err
		}
		if current.Sequence >= target.Sequence {
			return nil
		}
		if current.Sequence > 0 && current.Link() != w.verified {
			if err := m.held(ctx, namespace, current.Link()); err != nil {
				return err
			}
			w.verified = current.Link()
		}
		if create {
			cm = newMark(m.OperatorNamespace, namespace)
		}
		if err := setMark(&cm, reachedNow(target)); err != nil {
			return err
		}
		if create {
			err = m.Client.Create(ctx, &cm)
		} else {
			err = m.Client.Update(ctx, &cm)
		}
		switch {
		case err == nil:
			w.verified = target
			return nil
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5:
			reader = m.APIReader // another replica moved it: read it as it is
		default:
			return fmt.Errorf("cannot write the mark of namespace %s's chain: %w", namespace, err)
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
	if err := setMark(&cm, reachedNow(head)); err != nil {
		return false, err
	}
	if err := m.Client.Update(ctx, &cm); err != nil {
		return false, fmt.Errorf("cannot move the mark of namespace %s's chain back to the archive's head: %w", namespace, err)
	}
	return true, nil
}

// SeedMarks gives each chain that has a checkpoint and no mark its newest
// checkpoint as its mark: a ledger whose records left etcd before the
// managers kept marks starts from what the cluster already knew of its
// chains. It reads with reader and writes with c; another replica seeding
// at once changes nothing.
func SeedMarks(ctx context.Context, reader client.Reader, c client.Client, operatorNamespace string) (int, error) {
	states := &Store{APIReader: reader, OperatorNamespace: operatorNamespace}
	all, err := states.List(ctx)
	if err != nil {
		return 0, err
	}
	marks, err := Marks(ctx, reader, operatorNamespace)
	if err != nil {
		return 0, err
	}
	seeded := 0
	for ns, state := range all {
		latest := state.Latest()
		if latest == nil || marks[ns].Sequence > 0 {
			continue
		}
		cm := newMark(operatorNamespace, ns)
		if err := setMark(&cm, *latest); err != nil {
			return seeded, err
		}
		err := c.Create(ctx, &cm)
		switch {
		case err == nil:
			seeded++
		case !apierrors.IsAlreadyExists(err):
			return seeded, fmt.Errorf("cannot seed the mark of namespace %s's chain: %w", ns, err)
		}
	}
	return seeded, nil
}
