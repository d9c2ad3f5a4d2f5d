package shard

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// MemberLabel marks the coordination.k8s.io Leases by which managers say
// they are alive and share the work; its value is "true".
const MemberLabel = "toolledger.dev/member"

// staleMemberLeases is how many Lease durations a lapsed member Lease is
// kept before a live member deletes it: a crashed manager cannot delete
// its own, and every listing would read it again.
const staleMemberLeases = 4

// Members splits the active actions among the live managers, so that one
// manager, not all of them, writes each action's transitions and claims it:
// with N replicas racing for every action, N-1 of every claim are writes
// the API server refuses.
//
// Each manager holds a Lease of its own in the operator namespace, labelled
// MemberLabel and renewed every Renew. An action belongs to the live member
// that ranks first for its key under rendezvous hashing (Owner), so a
// member joining or leaving moves only the keys it gains or held. Each
// manager lists the Leases every Renew and, when the live set changes, has
// the actions it now owns reconciled (Resync), which hands a dead member's
// share to the others within its Lease's duration.
//
// Liveness is judged as client-go's leader election judges a leader: by
// when this manager saw a Lease change, on its own clock, so that clocks
// skewed between nodes neither keep a dead member alive nor drop a live
// one. A Lease seen for the first time counts from its renewTime when that
// is in the past.
//
// A split is an optimisation, never the guarantee: two managers with
// different views may both believe they own a key, and the compare-and-set
// claim keeps the dispatch single. A manager that has not listed the
// Leases for a whole Duration owns every key, as without sharding.
type Members struct {
	// Client reads and writes Leases; not cached, so that no informer
	// watches Leases across the cluster.
	Client client.Client
	// Namespace holds the member Leases (the operator namespace).
	Namespace string
	// Identity is this manager's executor ID: the Lease's holder and the
	// name ranked for each key.
	Identity string
	// Duration is how long a Lease lasts without renewal, at least a
	// second; Renew how often it is renewed and the Leases listed.
	Duration, Renew time.Duration
	// Resync has the actions this manager owns reconciled; called when the
	// live members change.
	Resync func(ctx context.Context, owns func(types.NamespacedName) bool)
	// Progressing reports whether this manager's workers keep up with its
	// share; the Lease is not renewed while they do not. Nil always renews.
	Progressing func(period time.Duration) bool
	// Serving says why this manager may take no share of the keys at all
	// (it may dispatch none of them); while it does, the manager holds no
	// Lease, so that the others take every key. Nil always serves.
	Serving func(ctx context.Context) error
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu sync.RWMutex
	// members are the live members' identities, sorted; nil owns every key.
	members []string
	// listed is when the Leases were last listed.
	listed time.Time
	// seen is, by Lease name, the resourceVersion last seen and when (on
	// this manager's clock) it was first seen.
	seen map[string]sighting
}

type sighting struct {
	version string
	at      time.Time
}

// Owns reports whether this manager handles key's active action.
func (s *Members) Owns(key types.NamespacedName) bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.members == nil || Owner(s.members, key) == s.Identity
}

// Owner is the member that ranks first for key; "" when there is none.
func Owner(members []string, key types.NamespacedName) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if score := rank(m, key.Namespace+"/"+key.Name); best == "" || score > bestScore {
			best, bestScore = m, score
		}
	}
	return best
}

// rank is member's rendezvous score for key: FNV-1a of both, mixed by
// splitmix64's finaliser so that close names spread evenly.
func rank(member, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	x := binary.BigEndian.Uint64(h.Sum(nil))
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Join creates this manager's Lease and lists the members once, so that
// its first reconciles already skip the others' keys; the manager's setup
// calls it before the controllers start.
func (s *Members) Join(ctx context.Context) error {
	if err := s.renew(ctx); err != nil {
		return fmt.Errorf("cannot create this manager's member Lease: %w", err)
	}
	return s.refresh(ctx)
}

// Start holds this manager's Lease until ctx ends, then deletes it so that
// the others take its share at their next listing rather than after its
// duration.
func (s *Members) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("shards")
	ticker := time.NewTicker(s.Renew)
	defer ticker.Stop()
	left := false
	for {
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case <-ticker.C:
		}
		var refusal error
		if s.Serving != nil {
			refusal = s.Serving(ctx)
		}
		switch {
		case refusal != nil:
			if !left {
				logger.Info("This manager may dispatch no key; leaving the members, so that the others take its share", "reason", refusal.Error())
				s.leave()
			}
			left = true
		case s.Progressing != nil && !s.Progressing(s.Duration):
			logger.Info("No reconcile returned for a Lease duration with work queued; not renewing the member Lease, so that the others take this manager's share", "duration", s.Duration)
		default:
			if err := s.renew(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Cannot renew this manager's member Lease; the others take its share if it lapses")
			} else if err == nil && left {
				logger.Info("This manager may dispatch again; joined the members")
				left = false
			}
		}
		if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Cannot list the member Leases; this manager keeps its last view for a Lease duration, then owns every key")
			s.forgetMembersIfStale(ctx)
		}
	}
}

// NeedLeaderElection is false: every replica holds a share.
func (s *Members) NeedLeaderElection() bool { return false }

func (s *Members) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// leaseName is the member Lease's name: "toolledger-member-" and the
// identity, or, when the identity is no valid name as it is, its valid
// characters and a hash of it, so that distinct identities never share a
// Lease.
func (s *Members) leaseName() string {
	const prefix = "toolledger-member-"
	if name := prefix + s.Identity; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	cleaned := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s.Identity)
	if len(cleaned) > 200 {
		cleaned = cleaned[:200]
	}
	return fmt.Sprintf("%s%s-%016x", prefix, strings.Trim(cleaned, "-"), rank(s.Identity, ""))
}

// leaseSeconds is Duration in whole seconds, rounded up.
func (s *Members) leaseSeconds() int32 {
	return int32(math.Ceil(s.Duration.Seconds()))
}

func (s *Members) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(s.now())
	var lease coordinationv1.Lease
	err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.leaseName()}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.leaseName(), Labels: map[string]string{MemberLabel: "true"}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(s.Identity),
				LeaseDurationSeconds: ptr.To(s.leaseSeconds()),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		return s.Client.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(s.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(s.leaseSeconds())
	return s.Client.Update(ctx, &lease)
}

// refresh lists the member Leases and, when the live set changed, resyncs.
// It deletes the Leases lapsed long ago.
func (s *Members) refresh(ctx context.Context) error {
	var leases coordinationv1.LeaseList
	if err := s.Client.List(ctx, &leases, client.InNamespace(s.Namespace), client.MatchingLabels{MemberLabel: "true"}); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	live, stale := s.judge(leases.Items, now)
	changed := !slices.Equal(live, s.members)
	s.members, s.listed = live, now
	s.mu.Unlock()
	for i := range stale {
		// Only the version judged stale: a member that came back keeps it.
		err := s.Client.Delete(ctx, &stale[i], client.Preconditions{ResourceVersion: ptr.To(stale[i].ResourceVersion)})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).WithName("shards").Error(err, "Cannot delete a lapsed member Lease", "lease", stale[i].Name)
		}
	}
	if changed {
		s.changed(ctx, live)
	}
	return nil
}

// forgetMembersIfStale has this manager own every key once it has not
// listed the Leases for a Lease duration: its view may hold members long
// dead, whose keys nobody would handle.
func (s *Members) forgetMembersIfStale(ctx context.Context) {
	s.mu.Lock()
	forget := s.members != nil && s.now().Sub(s.listed) > s.Duration
	if forget {
		s.members = nil
	}
	s.mu.Unlock()
	if forget {
		s.changed(ctx, nil)
	}
}

func (s *Members) changed(ctx context.Context, live []string) {
	log.FromContext(ctx).WithName("shards").Info("Live members changed; reconciling the actions this manager now owns", "members", live)
	shardMembers.Set(float64(len(live)))
	if s.Resync != nil {
		s.Resync(ctx, s.Owns)
	}
}

// judge returns the holders of the live Leases, sorted, and the Leases
// lapsed for staleMemberLeases durations; s.mu is held.
func (s *Members) judge(leases []coordinationv1.Lease, now time.Time) (live []string, stale []coordinationv1.Lease) {
	if s.seen == nil {
		s.seen = map[string]sighting{}
	}
	present := map[string]bool{}
	for _, l := range leases {
		spec := l.Spec
		if spec.HolderIdentity == nil || spec.RenewTime == nil || spec.LeaseDurationSeconds == nil || l.DeletionTimestamp != nil {
			continue
		}
		present[l.Name] = true
		seen, known := s.seen[l.Name]
		if !known || seen.version != l.ResourceVersion {
			seen = sighting{version: l.ResourceVersion, at: now}
			if !known && spec.RenewTime.Time.Before(now) {
				seen.at = spec.RenewTime.Time
			}
			s.seen[l.Name] = seen
		}
		duration := time.Duration(*spec.LeaseDurationSeconds) * time.Second
		switch lapsed := now.Sub(seen.at); {
		case lapsed < duration:
			live = append(live, *spec.HolderIdentity)
		case lapsed > staleMemberLeases*duration:
			stale = append(stale, l)
		}
	}
	for name := range s.seen {
		if !present[name] {
			delete(s.seen, name)
		}
	}
	slices.Sort(live)
	return slices.Compact(live), stale
}

// leave deletes this manager's Lease, with a context of its own: the
// manager's has ended.
func (s *Members) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.leaseName()}}
	if err := client.IgnoreNotFound(s.Client.Delete(ctx, lease)); err != nil {
		log.FromContext(ctx).Error(err, "Cannot delete this manager's member Lease; the others take its share when it lapses")
	}
}
