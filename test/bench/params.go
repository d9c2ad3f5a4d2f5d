package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// chartMemoryLimit is the chart's memory limit of the manager container
// (charts/toolledger/values.yaml, resources.limits.memory).
const chartMemoryLimit = 256 << 20

// largeParamsStep is the manager process's memory with Actions active
// actions whose parameters are ParamBytes each: held for an approval, so
// that every one stays in the cache, each read once from the API server.
type largeParamsStep struct {
	Actions    int
	ParamBytes int
	CreateTime time.Duration
	// While the actions were created and held, with the manager running:
	// the peak resident set (VmHWM) and, once all were held, the live
	// heap and RSS.
	PeakRSS, HeapLive, RSS float64
	// A manager started with them all present: its peak while it lists
	// and caches them, and its live heap and RSS once settled.
	RestartPeakRSS, RestartHeapLive, RestartRSS float64
}

// largeParamsNamespace holds the actions of the step.
const largeParamsNamespace = "large-params"

// largeParams creates the step's actions with the manager binary running,
// waits until each is held for approval, reads the manager's memory, then
// starts a second manager with them present and reads its memory too.
func (b *bench) largeParams(ctx context.Context) error {
	s := b.settings
	if s.LargeParamActions == 0 {
		return nil
	}
	tool := b.fastTool(largeParamsNamespace)
	tool.Spec.ApprovalRequired = true
	if err := b.c.namespace(ctx, tool); err != nil {
		return err
	}
	step := largeParamsStep{Actions: s.LargeParamActions, ParamBytes: s.LargeParamBytes}
	log := filepath.Join(b.tmp, "large-params-manager.log")
	p, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, log, "--executor-id=bench-large-params")
	if err != nil {
		return err
	}
	defer p.stop()
	// ParamBytes is the parameters' encoded size, braces and name included.
	document := []byte(`"` + strings.Repeat("d", s.LargeParamBytes-len(`{"document":""}`)) + `"`)
	began := time.Now()
	err = parallel(ctx, step.Actions, s.MemoryCreateConcurrency, func(ctx context.Context, i int) error {
		return b.c.k8s.Create(ctx, &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: largeParamsNamespace, Name: fmt.Sprintf("document-%05d", i)},
			Spec: v1alpha1.ToolActionSpec{
				ToolRef:    v1alpha1.ToolReference{Name: toolName},
				Parameters: map[string]apiextensionsv1.JSON{"document": {Raw: document}},
			},
		})
	})
	if err != nil {
		return fmt.Errorf("cannot create the actions with large parameters: %w", err)
	}
	step.CreateTime = time.Since(began)
	if err := b.waitHeld(ctx, step.Actions); err != nil {
		return err
	}
	if step.PeakRSS, err = peakRSS(p); err != nil {
		return err
	}
	m, err := p.settle(ctx, 3*time.Second)
	if err != nil {
		return err
	}
	step.HeapLive, step.RSS = m.sum("go_gc_heap_live_bytes", nil), m.sum("process_resident_memory_bytes", nil)
	b.logf("large parameters: %d active actions of %s each held in %s; manager peak RSS %s, live heap %s, RSS %s",
		step.Actions, mib(float64(step.ParamBytes)), step.CreateTime.Round(time.Millisecond), mib(step.PeakRSS), mib(step.HeapLive), mib(step.RSS))
	p.stop()

	restarted, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, log, "--executor-id=bench-large-params-restarted")
	if err != nil {
		return err
	}
	defer restarted.stop()
	if m, err = restarted.settle(ctx, 3*time.Second); err != nil {
		return err
	}
	if step.RestartPeakRSS, err = peakRSS(restarted); err != nil {
		return err
	}
	step.RestartHeapLive, step.RestartRSS = m.sum("go_gc_heap_live_bytes", nil), m.sum("process_resident_memory_bytes", nil)
	b.logf("large parameters: a manager started with them present: peak RSS %s, live heap %s, RSS %s",
		mib(step.RestartPeakRSS), mib(step.RestartHeapLive), mib(step.RestartRSS))
	if step.PeakRSS > chartMemoryLimit || step.RestartPeakRSS > chartMemoryLimit {
		b.results.Failures = append(b.results.Failures, fmt.Sprintf("large parameters: the manager's peak RSS (%s, %s after a restart) exceeds the chart's limit of %s",
			mib(step.PeakRSS), mib(step.RestartPeakRSS), mib(chartMemoryLimit)))
	}
	b.results.LargeParams = &step
	return nil
}

// waitHeld waits until n actions of the step wait for an approval, which
// the controller decides after reading their parameters.
func (b *bench) waitHeld(ctx context.Context, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var held metav1.PartialObjectMetadataList
		held.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ToolActionList"))
		err := b.c.k8s.List(ctx, &held, client.InNamespace(largeParamsNamespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.phase", string(v1alpha1.PhaseAwaitingApproval))})
		if err != nil {
			return err
		}
		if len(held.Items) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("large parameters: %d of %d actions held for approval after 10 minutes", len(held.Items), n)
		}
		if err := testenv.Sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// peakRSS is the process's peak resident set so far (VmHWM).
func peakRSS(p *managerProcess) (float64, error) {
	status, err := os.ReadFile(filepath.Join("/proc", p.pid(), "status"))
	if err != nil {
		return 0, fmt.Errorf("cannot read the manager's peak memory: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0, fmt.Errorf("cannot read VmHWM %q: %w", rest, err)
			}
			return kib * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%s/status", p.pid())
}
