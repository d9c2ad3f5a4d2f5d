package controllers

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

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
		counts[owner(members, k)]++
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
		before, after := owner(three, k), owner(two, k)
		if before != after {
			moved++
			if before != "b-2" {
				t.Fatalf("key %s moved from %s to %s, though only b-2 left", k, before, after)
			}
		}
		if before == "b-2" && after == "b-2" {
			t.Fatalf("key %s still belongs to b-2, which left", k)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved when a member left")
	}
}

func TestShardsOwnEveryKeyUntilMembersAreKnown(t *testing.T) {
	s := &Shards{Identity: "a-1"}
	k := key("shop", "order-1")
	if !s.Owns(k) {
		t.Fatal("a manager that has not listed the members must own every key")
	}
	s.members = []string{"a-1", "b-2"}
	if s.Owns(k) == (owner(s.members, k) != "a-1") {
		t.Fatalf("Owns(%s) disagrees with owner %s", k, owner(s.members, k))
	}
	s.members = []string{"b-2"}
	if s.Owns(k) {
		t.Fatal("a manager missing from the live members must own no key")
	}
	var unsharded *Shards
	if !unsharded.Owns(k) {
		t.Fatal("without sharding every key is owned")
	}
}

func TestLiveMembersDropLapsedAndDeletedLeases(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	lease := func(holder string, renewedAgo time.Duration, deleting bool) coordinationv1.Lease {
		l := coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime:            &metav1.MicroTime{Time: now.Add(-renewedAgo)},
		}}
		if deleting {
			l.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return l
	}
	got := liveMembers([]coordinationv1.Lease{
		lease("c-3", time.Second, false),
		lease("a-1", 14*time.Second, false),
		lease("b-2", 15*time.Second, false), // lapsed just now
		lease("d-4", time.Second, true),
		{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("e-5")}}, // never renewed
	}, now)
	if fmt.Sprint(got) != "[a-1 c-3]" {
		t.Fatalf("live members = %v, want [a-1 c-3]", got)
	}
}

func TestLeaseNameIsAValidName(t *testing.T) {
	for identity, want := range map[string]string{
		"toolledger-7d9f-abc123": "toolledger-member-toolledger-7d9f-abc123",
		"Build_Host-01-ab12cd":   "toolledger-member-build-host-01-ab12cd",
	} {
		if got := (&Shards{Identity: identity}).leaseName(); got != want {
			t.Errorf("lease name of %q = %q, want %q", identity, got, want)
		}
	}
}
