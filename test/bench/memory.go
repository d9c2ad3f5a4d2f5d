package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// memoryStep is the manager process's memory with Present finished
// actions in the cluster.
type memoryStep struct {
	Present    int
	Created    int
	CreateTime time.Duration
	// SettleTime runs from the process start until its deletion watch has
	// listed every action and it has stayed idle for 3s.
	SettleTime time.Duration
	// At settle, from the manager's /metrics.
	HeapLive  float64 // go_gc_heap_live_bytes: what the last GC found live
	HeapInuse float64 // go_memstats_heap_inuse_bytes
	RSS       float64 // process_resident_memory_bytes
	// After the first GC that started after settle (the runtime forces one
	// at least every 2 minutes), when GCWait allowed waiting for it.
	AfterGC          bool
	GCWaited         time.Duration
	HeapLiveAfterGC  float64
	HeapInuseAfterGC float64
	RSSAfterGC       float64
}

// live is the best post-GC live-heap figure of the step.
func (m memoryStep) live() float64 {
	if m.AfterGC {
		return m.HeapLiveAfterGC
	}
	return m.HeapLive
}

func (m memoryStep) inuse() float64 {
	if m.AfterGC {
		return m.HeapInuseAfterGC
	}
	return m.HeapInuse
}

func (m memoryStep) rss() float64 {
	if m.AfterGC {
		return m.RSSAfterGC
	}
	return m.RSS
}

// memoryNamespace holds the finished actions the memory steps create.
const memoryNamespace = "memory"

// memory tops the cluster up to target finished ToolActions — created
// directly with their status already Succeeded (a create and a status
// update each, bounded concurrency), not through the operator — then starts
// the manager binary with its shipped defaults and reads its memory once it
// has reconciled them all.
func (b *bench) memory(ctx context.Context, target int) error {
	s := b.settings
	if err := b.c.namespace(ctx, b.fastTool(memoryNamespace)); err != nil {
		return err
	}
	existing, err := countToolActions(ctx, b.c.k8s)
	if err != nil {
		return err
	}
	step := memoryStep{}
	if need := target - existing; need > 0 {
		offset := b.memoryCreated
		began := time.Now()
		err := parallel(ctx, need, s.MemoryCreateConcurrency, func(ctx context.Context, i int) error {
			return createFinished(ctx, b.c.k8s, memoryNamespace, fmt.Sprintf("done-%07d", offset+i), offset+i+1, time.Now())
		})
		if err != nil {
			return fmt.Errorf("cannot create finished actions: %w", err)
		}
		step.Created, step.CreateTime = need, time.Since(began)
		b.memoryCreated += need
		b.logf("memory: created %d finished actions in %s (%.0f/s, %d at a time)", need, step.CreateTime.Round(time.Millisecond),
			float64(need)/step.CreateTime.Seconds(), s.MemoryCreateConcurrency)
	}
	if step.Present, err = countToolActions(ctx, b.c.k8s); err != nil {
		return err
	}

	log := filepath.Join(b.tmp, fmt.Sprintf("memory-%d-manager.log", step.Present))
	started := time.Now()
	p, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, log, "--executor-id=bench-memory")
	if err != nil {
		return err
	}
	defer p.stop()
	m, err := p.settle(ctx, 3*time.Second)
	if err != nil {
		return fmt.Errorf("memory: the manager with %d actions present: %w", step.Present, err)
	}
	step.SettleTime = time.Since(started)
	step.HeapLive = m.sum("go_gc_heap_live_bytes", nil)
	step.HeapInuse = m.sum("go_memstats_heap_inuse_bytes", nil)
	step.RSS = m.sum("process_resident_memory_bytes", nil)
	gcs := m.sum("go_gc_duration_seconds_count", nil)
	b.logf("memory: %d actions present; manager settled in %s: live heap %s, heap in use %s, RSS %s",
		step.Present, step.SettleTime.Round(time.Millisecond), mib(step.HeapLive), mib(step.HeapInuse), mib(step.RSS))
	if s.MemoryGCWait > 0 {
		waitFrom := time.Now()
		for time.Since(waitFrom) < s.MemoryGCWait {
			if err := testenv.Sleep(ctx, time.Second); err != nil {
				return err
			}
			if m, err = p.metrics(ctx); err != nil {
				return err
			}
			if m.sum("go_gc_duration_seconds_count", nil) > gcs {
				step.AfterGC = true
				step.GCWaited = time.Since(waitFrom)
				step.HeapLiveAfterGC = m.sum("go_gc_heap_live_bytes", nil)
				step.HeapInuseAfterGC = m.sum("go_memstats_heap_inuse_bytes", nil)
				step.RSSAfterGC = m.sum("process_resident_memory_bytes", nil)
				b.logf("memory: after the next GC (%s later): live heap %s, heap in use %s, RSS %s",
					step.GCWaited.Round(time.Second), mib(step.HeapLiveAfterGC), mib(step.HeapInuseAfterGC), mib(step.RSSAfterGC))
				break
			}
		}
	}
	b.results.Memory = append(b.results.Memory, step)
	return nil
}

// synced waits until the manager's deletion watches are in sync: it has
// started its work.
func (p *managerProcess) synced(ctx context.Context) error {
	for deadline := time.Now().Add(time.Minute); ; {
		if m, err := p.metrics(ctx); err == nil && m.sum("toolledger_deletion_watch_synced", nil) == deletionWatches {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager's deletion watches were not in sync within a minute (see %s)", p.logPath)
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// settle waits until the manager process has settled: its deletion
// watches have listed every action (the finished ones are neither cached
// nor reconciled), then quiet without a reconcile. It returns the last
// scrape of its metrics.
func (p *managerProcess) settle(ctx context.Context, quiet time.Duration) (metrics, error) {
	var last float64
	quietSince := time.Now()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if err := testenv.Sleep(ctx, 500*time.Millisecond); err != nil {
			return nil, err
		}
		m, err := p.metrics(ctx)
		if err != nil {
			return nil, err
		}
		done := m.sum("controller_runtime_reconcile_total", map[string]string{"controller": "toolaction"})
		if done != last {
			last, quietSince = done, time.Now()
		}
		if m.sum("toolledger_deletion_watch_synced", nil) == deletionWatches && time.Since(quietSince) >= quiet {
			return m, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the manager did not settle in 10 minutes (see %s)", p.logPath)
		}
	}
}

// createFinished creates one action in namespace as the operator leaves a
// succeeded one: finalizer, spec, and a Succeeded status, completed at
// completed.
func createFinished(ctx context.Context, k8s client.Client, namespace, name string, amount int, completed time.Time) error {
	a := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Finalizers: []string{v1alpha1.Finalizer}},
		Spec:       spec(amount),
	}
	if err := k8s.Create(ctx, a); err != nil {
		return err
	}
	a.Status = succeededStatus(namespace, name, amount, completed)
	return k8s.Status().Update(ctx, a)
}

// objectSizes is the JSON size of finished actions, and what of it is
// managedFields, averaged over a sample.
type objectSizes struct {
	Namespace     string
	Sampled       int
	Bytes         float64
	ManagedFields float64
	History       float64
}

func (b *bench) sizes(ctx context.Context, ns string) (objectSizes, error) {
	var list v1alpha1.ToolActionList
	if err := b.c.k8s.List(ctx, &list, client.InNamespace(ns), client.Limit(50)); err != nil {
		return objectSizes{}, err
	}
	out := objectSizes{Namespace: ns}
	for i := range list.Items {
		a := list.Items[i]
		all, _ := json.Marshal(a)
		managed, _ := json.Marshal(a.ManagedFields)
		history, _ := json.Marshal(a.Status.History)
		out.Sampled++
		out.Bytes += float64(len(all))
		out.ManagedFields += float64(len(managed))
		out.History += float64(len(history))
	}
	if out.Sampled > 0 {
		n := float64(out.Sampled)
		out.Bytes, out.ManagedFields, out.History = out.Bytes/n, out.ManagedFields/n, out.History/n
	}
	return out, nil
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }
