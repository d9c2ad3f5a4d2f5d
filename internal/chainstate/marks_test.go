package chainstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/toolledger/toolledger/internal/archive"
)

// holder is an archive that holds the links of one chain: those of held.
type holder struct {
	mu   sync.Mutex
	held map[archive.Link]bool
	asks atomic.Int64
}

func (h *holder) Holds(_ context.Context, marks map[string]archive.Link) (map[string]archive.Holding, error) {
	h.asks.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]archive.Holding{}
	for ns, mark := range marks {
		out[ns] = archive.Holding{Held: h.held[mark], Head: mark}
	}
	return out, nil
}

func chainLink(n int64) archive.Link { return archive.Link{Sequence: n, Hash: fmt.Sprintf("h%d", n)} }

// marker is a Marker on a fake API server that counts its writes, each
// taking slow.
func marker(t *testing.T, h *holder, slow time.Duration) (*Marker, *atomic.Int64, client.Client) {
	t.Helper()
	writes := &atomic.Int64{}
	count := func() {
		writes.Add(1)
		time.Sleep(slow)
	}
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	return &Marker{Reader: c, APIReader: c, Client: c, Archive: h, OperatorNamespace: "toolledger-system"}, writes, c
}

func markOf(t *testing.T, m *Marker) archive.Link {
	t.Helper()
	link, err := m.Mark(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	return link
}

// Records that retire at once share the writes of their namespace's mark,
// which ends at the newest of their links and never moves back.
func TestRecordsRetiringAtOnceShareTheirMarksWrites(t *testing.T) {
	m, writes, _ := marker(t, &holder{}, 20*time.Millisecond)
	var wg sync.WaitGroup
	for i := int64(1); i <= 40; i++ {
		wg.Go(func() {
			if err := m.Cover(context.Background(), "shop", chainLink(i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := markOf(t, m); got != chainLink(40) {
		t.Errorf("mark %+v, want the newest link, 40", got)
	}
	if n := writes.Load(); n > 10 {
		t.Errorf("%d writes of the mark for 40 records retiring at once, want them shared (at most 10)", n)
	}
	if err := m.Cover(context.Background(), "shop", chainLink(12)); err != nil || writes.Load() > 10 {
		t.Errorf("covering a link behind the mark: %v, %d writes; want nothing written", err, writes.Load())
	}
	if got := markOf(t, m); got != chainLink(40) {
		t.Errorf("mark %+v after a link behind it, want 40: a mark never moves back", got)
	}
}

// A mark moved back by an acknowledgement (on any replica) is checked with
// the archive before this replica moves it past it: its memory of what it
// wrote does not stand in for the mark.
func TestAMarkMovedBackIsCheckedBeforeItMovesOn(t *testing.T) {
	h := &holder{held: map[archive.Link]bool{chainLink(7): true}}
	m, _, _ := marker(t, h, 0)
	ctx := context.Background()
	if err := m.Cover(ctx, "shop", chainLink(10)); err != nil {
		t.Fatal(err)
	}
	// Another replica applies an acknowledgement: the archive lost 8–10.
	other := &Marker{Reader: m.Reader, APIReader: m.APIReader, Client: m.Client, Archive: h, OperatorNamespace: m.OperatorNamespace}
	if moved, err := other.Reset(ctx, "shop", chainLink(10), chainLink(7)); err != nil || !moved {
		t.Fatalf("Reset: %t, %v", moved, err)
	}
	asked := h.asks.Load()
	// A record kept since, on the chain that goes on from 7.
	if err := m.Cover(ctx, "shop", chainLink(8)); err != nil {
		t.Fatal(err)
	}
	if got := markOf(t, m); got != chainLink(8) {
		t.Fatalf("mark %+v, want 8: the record that retired after the reset is covered", got)
	}
	if h.asks.Load() == asked {
		t.Error("the mark moved back was moved past without asking the archive whether it holds it")
	}

	// An archive that no longer holds the mark refuses to have it moved.
	if err := other.Client.Update(ctx, markConfigMap(t, other, chainLink(9))); err != nil {
		t.Fatal(err)
	}
	if err := m.Cover(ctx, "shop", chainLink(11)); !errors.Is(err, ErrMarkBehind) {
		t.Fatalf("covering 11 past a mark the archive does not hold: %v, want ErrMarkBehind", err)
	}
	if got := markOf(t, m); got != chainLink(9) {
		t.Errorf("mark %+v, want 9, unmoved", got)
	}
}

// markConfigMap is the mark's ConfigMap as it stands, set to link.
func markConfigMap(t *testing.T, m *Marker, link archive.Link) client.Object {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	if err := m.Client.Get(ctx, MarkKey(m.OperatorNamespace, "shop"), cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{markKey: fmt.Sprintf(`{"sequence":%d,"hash":%q,"time":"2026-12-07T10:00:00Z"}`, link.Sequence, link.Hash)}
	return cm
}

// A ledger whose records left etcd before the managers kept marks starts
// from its chains' newest checkpoints; a chain with a mark keeps it.
func TestMarksAreSeededFromTheNewestCheckpoints(t *testing.T) {
	m, _, c := marker(t, &holder{}, 0)
	ctx := context.Background()
	for ns, heads := range map[string][]int64{"shop": {3, 7}, "billing": {4}} {
		if err := Update(ctx, c, c, m.OperatorNamespace, ns, func(s *State) bool {
			for i, h := range heads {
				if _, err := Checkpoint(s, chainLink(h), time.Date(2026, 12, 1, i, 0, 0, 0, time.UTC), time.Minute, 0); err != nil {
					t.Fatal(err)
				}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Cover(ctx, "billing", chainLink(9)); err != nil {
		t.Fatal(err)
	}
	seeded, err := SeedMarks(ctx, c, c, m.OperatorNamespace)
	if err != nil || seeded != 1 {
		t.Fatalf("SeedMarks = %d, %v; want 1, shop's", seeded, err)
	}
	marks, err := Marks(ctx, c, m.OperatorNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if marks["shop"].Link() != chainLink(7) || marks["billing"].Link() != chainLink(9) {
		t.Errorf("marks %+v, want shop at its newest checkpoint 7 and billing at its own mark 9", marks)
	}
}
