package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/toolledger/toolledger/internal/testenv"
)

// onlyThroughput is the -only value that runs the throughput sweep alone
// and logs its ratios and CPU per operation.
const onlyThroughput = "throughput"

// profileAPIServer starts taking the kube-apiserver's CPU profile over the
// measured part of a throughput run (after the warm-up) into
// -apiserver-profiles/<name>.pprof, and returns a wait for it. Profiles of
// the ceiling and of toolledger side by side show where the API server
// spends its CPU per operation.
func (b *bench) profileAPIServer(ctx context.Context, name string) (wait func() error) {
	dir := b.settings.APIServerProfiles
	if dir == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			if err := testenv.Sleep(ctx, b.settings.Warmup); err != nil {
				return err
			}
			seconds := strconv.Itoa(max(1, int(b.settings.Measure.Round(time.Second).Seconds())))
			profile, err := b.c.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", seconds).DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("cannot take the kube-apiserver's CPU profile: %w", err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, name+".pprof"), profile, 0o644)
		}()
	}()
	return func() error { return <-done }
}

// logThroughput logs what the throughput sweep measured, for -only
// throughput.
func (b *bench) logThroughput() {
	base := b.baseline()
	for _, l := range b.results.Levels {
		shipped := l.Toolledger[base.ID]
		c3, fl, tl := l.Ceiling3.CPUPerOp, l.Floor.CPUPerOp, shipped.CPUPerOp
		b.logf("concurrency %d: ceiling (3 writes) %.1f/s, floor %.1f/s, toolledger as shipped %.1f/s: %.2f of the floor, %.2f of the ceiling; CPU ms per operation (kube-apiserver / etcd / harness) %.2f / %.2f / %.2f against the floor's %.2f / %.2f / %.2f and the ceiling's %.2f / %.2f / %.2f; %.2f requests per action",
			l.Concurrency, l.Ceiling3.Throughput, l.Floor.Throughput, shipped.Throughput, safeDiv(shipped.Throughput, l.Floor.Throughput), safeDiv(shipped.Throughput, l.Ceiling3.Throughput),
			tl.APIServer, tl.Etcd, tl.Harness, fl.APIServer, fl.Etcd, fl.Harness, c3.APIServer, c3.Etcd, c3.Harness, shipped.RequestsPerOp)
	}
}
