package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func key(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// shardKeys are 3000 action keys over three namespaces, named as agents name them.
func shardKeys() []types.NamespacedName {
	var keys []types.NamespacedName
	for i := range 3000 {
		keys = append(keys, key(fmt.Sprintf("tenant-%d", i%3), fmt.Sprintf("order-%d-charge", i)))
	}
	return keys
}

func TestShardsSplitKeysEvenly(t *testing.T) {
	members := []string{"toolledger-7d9f-abc123", "toolledger-7d9f-abc124", "toolledger-7d9f-abc125"}
	counts := map[string]int{}
	for _, k := range shardKeys() {
		counts[Owner(members, k)]++
	}
	for _, m := range members {
		// 1000 each on average; 850 is more than five standard deviations off.
		if counts[m] < 850 || counts[m] > 1150 {
			t.Errorf("member %s owns %d of 3000 keys, want about 1000 (all: %v)", m, counts[m], counts)
		}
	}
}

func TestShardsMoveOnlyTheKeysOfAMemberThatLeaves(t *testing.T) {
	three := []string{"a-1", "b-2", "c-3"}
	two := []string{"a-1", "c-3"}
	moved := 0
	for _, k := range shardKeys() {
		before, after := Owner(three, k), Owner(two, k)
		if before != after {
			moved++
			if before != "b-2" {
				t.Fatalf("key %s moved from %s to %s, though only b-2 left", k, before, after)
			}
		}
		if after == "b-2" {
			t.Fatalf("key %s still belongs to b-2, which left", k)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved when a member left")
	}
}

func TestShardsOwnEveryKeyUntilMembersAreKnown(t *testing.T) {
	s := &Members{Identity: "a-1"}
	k := key("shop", "order-1")
	if !s.Owns(k) {
		t.Fatal("a manager that has not listed the members must own every key")
	}
	s.members = []string{"a-1", "b-2"}
	if s.Owns(k) != (Owner(s.members, k) == "a-1") {
		t.Fatalf("Owns(%s) disagrees with owner %s", k, Owner(s.members, k))
	}
	s.members = []string{"b-2"}
	if s.Owns(k) {
		t.Fatal("a manager missing from the live members must own no key")
	}
	var unsharded *Members
	if !unsharded.Owns(k) {
		t.Fatal("without sharding every key is owned")
	}
}

func memberLease(name, holder, version string, renewed time.Time) coordinationv1.Lease {
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime:            &metav1.MicroTime{Time: renewed},
		},
	}
}

func TestShardsJudgeLivenessOnTheirOwnClock(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := &Members{}
	deleting := memberLease("d", "d-4", "1", now)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	live, stale := s.judge([]coordinationv1.Lease{
		memberLease("c", "c-3", "1", now.Add(-time.Second)),
		memberLease("a", "a-1", "1", now.Add(-14*time.Second)),
		memberLease("b", "b-2", "1", now.Add(-15*time.Second)), // lapsed just now
		memberLease("f", "f-6", "1", now.Add(time.Hour)),       // a clock an hour fast
		memberLease("g", "g-7", "1", now.Add(-61*time.Second)), // lapsed four durations ago
		deleting,
		{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("e-5")}}, // never renewed
	}, now)
	if fmt.Sprint(live) != "[a-1 c-3 f-6]" {
		t.Fatalf("live members = %v, want [a-1 c-3 f-6]", live)
	}
	if len(stale) != 1 || stale[0].Name != "g" {
		t.Fatalf("stale Leases = %v, want g only", stale)
	}

	// 16s later: the fast clock's Lease was never renewed and lapses by
	// this clock; a's was renewed (a new version) by a clock 20s slow.
	later := now.Add(16 * time.Second)
	live, _ = s.judge([]coordinationv1.Lease{
		memberLease("a", "a-1", "2", later.Add(-20*time.Second)),
		memberLease("f", "f-6", "1", now.Add(time.Hour)),
	}, later)
	if fmt.Sprint(live) != "[a-1]" {
		t.Fatalf("live members 16s later = %v, want [a-1]", live)
	}
}

func TestShardsOwnEveryKeyWhenTheirViewIsStale(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	resynced := 0
	s := &Members{Identity: "a-1", Duration: 15 * time.Second, Now: func() time.Time { return now },
		members: []string{"a-1", "b-2"}, listed: now.Add(-10 * time.Second)}
	s.Resync = func(_ context.Context, _ func(types.NamespacedName) bool) { resynced++ }
	s.forgetMembersIfStale(context.Background())
	if s.members == nil || resynced != 0 {
		t.Fatal("a view listed 10s ago was forgotten")
	}
	now = now.Add(6 * time.Second)
	s.forgetMembersIfStale(context.Background())
	if s.members != nil || resynced != 1 {
		t.Fatalf("a view listed 16s ago was kept (members %v, %d resyncs)", s.members, resynced)
	}
}

func TestLeaseNameIsAValidNameOfItsOwn(t *testing.T) {
	names := map[string]string{}
	for _, identity := range []string{"toolledger-7d9f-abc123", "Build_Host-01-ab12cd", "build-host-01-ab12cd", "a..b", "a_b", "a-b"} {
		name := (&Members{Identity: identity}).leaseName()
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("lease name %q of %q is invalid: %v", name, identity, errs)
		}
		if other, taken := names[name]; taken {
			t.Errorf("identities %q and %q share the lease name %q", other, identity, name)
		}
		names[name] = identity
	}
	if got := (&Members{Identity: "toolledger-7d9f-abc123"}).leaseName(); got != "toolledger-member-toolledger-7d9f-abc123" {
		t.Errorf("a valid identity's lease name is %q, want it kept as it is", got)
	}
}

func TestShardsStopRenewingWhileTheWorkersAreWedged(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	var progressing atomic.Bool
	s := &Members{Client: c, Namespace: "toolledger-system", Identity: "a-1", Duration: time.Second, Renew: 10 * time.Millisecond,
		Progressing: func(time.Duration) bool { return progressing.Load() }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: "toolledger-system", Name: s.leaseName()}
	version := func() string {
		var lease coordinationv1.Lease
		if err := c.Get(ctx, key, &lease); err != nil {
			t.Fatal(err)
		}
		return lease.ResourceVersion
	}
	joined := version()
	stopped := make(chan struct{})
	go func() { _ = s.Start(ctx); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	if v := version(); v != joined {
		t.Fatalf("the Lease was renewed (version %s, then %s) while the workers made no progress", joined, v)
	}
	progressing.Store(true)
	for deadline := time.Now().Add(5 * time.Second); version() == joined; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Lease was not renewed once the workers moved again")
		}
	}
	cancel()
	<-stopped
	if err := c.Get(context.Background(), key, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Lease outlived its manager's stop: %v", err)
	}
}

// A manager that may dispatch no key (refused by the archive binding)
// deletes its Lease, so that the others own its share, and joins again
// once it may.
func TestMembersLeaveWhileNotServingAndJoinAgain(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	var refused atomic.Bool
	refused.Store(true)
	refusing := &Members{Client: c, Namespace: "toolledger-system", Identity: "a-1", Duration: time.Second, Renew: 10 * time.Millisecond,
		Serving: func(context.Context) error {
			if refused.Load() {
				return fmt.Errorf("the ledger's archive is not this manager's")
			}
			return nil
		}}
	other := &Members{Client: c, Namespace: "toolledger-system", Identity: "b-2", Duration: time.Second, Renew: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range []*Members{refusing, other} {
		if err := m.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan struct{})
	go func() { _ = refusing.Start(ctx); close(stopped) }()
	leaseOf := client.ObjectKey{Namespace: "toolledger-system", Name: refusing.leaseName()}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	waitFor("the refused manager kept its Lease", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, leaseOf, &coordinationv1.Lease{}))
	})
	if err := other.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range shardKeys()[:300] {
		if !other.Owns(k) {
			t.Fatalf("key %s is not the serving manager's while the other one refuses", k)
		}
	}
	refused.Store(false)
	waitFor("the manager did not join again once it may dispatch", func() bool {
		return c.Get(ctx, leaseOf, &coordinationv1.Lease{}) == nil
	})
	cancel()
	<-stopped
}
