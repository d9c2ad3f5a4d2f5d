package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// cpuLayout places the run's processes on the machine's CPUs. Split, the
// control plane (kube-apiserver and etcd) has the first half of the CPUs to
// itself and everything else the run starts — this process with the
// callers, the in-process manager and the downstreams, and manager
// processes — has the other half: as in a cluster, where neither the
// operator nor the agents run on the API server's machines, so that the
// control plane is what limits throughput, as the ceiling assumes. Shared,
// every process may use every CPU. The layout is applied to every thread
// of every process of the run, again each half second, so that processes
// and threads started since follow it.
type cpuLayout struct {
	mu     sync.Mutex
	split  bool // as configured; never on a machine with one CPU
	shared bool // every process on every CPU for now (share)
	self   int
	cpus   int
	plane  unix.CPUSet
	others unix.CPUSet
	all    unix.CPUSet
}

func newCPULayout(split bool) *cpuLayout {
	l := &cpuLayout{self: os.Getpid(), cpus: runtime.NumCPU()}
	l.split = split && l.cpus >= 2
	for cpu := range l.cpus {
		l.all.Set(cpu)
		if cpu < l.cpus/2 {
			l.plane.Set(cpu)
		} else {
			l.others.Set(cpu)
		}
	}
	return l
}

// describe names the CPUs of the control plane and of the rest.
func (l *cpuLayout) describe() (plane, others string) {
	span := func(from, to int) string {
		if to-from == 1 {
			return fmt.Sprintf("CPU %d", from)
		}
		return fmt.Sprintf("CPUs %d–%d", from, to-1)
	}
	return span(0, l.cpus/2), span(l.cpus/2, l.cpus)
}

// keep applies the layout until ctx ends.
func (l *cpuLayout) keep(ctx context.Context) error {
	if !l.split {
		return nil
	}
	if err := l.apply(); err != nil {
		return err
	}
	go every(ctx, 500*time.Millisecond, func() { _ = l.apply() })
	return nil
}

// share puts every process on every CPU (on) or back in the split layout.
func (l *cpuLayout) share(on bool) error {
	if !l.split {
		return nil
	}
	l.mu.Lock()
	l.shared = on
	l.mu.Unlock()
	return l.apply()
}

// apply sets the CPU affinity of every thread of the run's processes.
func (l *cpuLayout) apply() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	procs := readProcs()
	var errs []error
	for pid, p := range procs {
		if !descends(procs, pid, l.self) {
			continue
		}
		set := l.others
		switch {
		case l.shared:
			set = l.all
		case p.name == "kube-apiserver" || p.name == "etcd":
			set = l.plane
		}
		threads, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			continue // the process ended
		}
		for _, t := range threads {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("cannot set the CPU affinity of thread %d of %s (%d): %w", tid, p.name, pid, err))
			}
		}
	}
	return errors.Join(errs...)
}
