package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc CPU times on Linux.
const clockTicks = 100

// cpuWatcher samples, once a second, the CPU time of the machine and of
// this process with everything it started (control plane, managers,
// builds), so the report can say how much of the machine other work took
// while the numbers were measured. Linux only; elsewhere it reports nothing.
type cpuWatcher struct {
	mu        sync.Mutex
	self      int
	ours      map[int]float64 // pid → CPU seconds, last seen
	firstBusy float64
	lastBusy  float64
	started   time.Time
	ok        bool
}

func watchCPU(ctx context.Context) *cpuWatcher {
	w := &cpuWatcher{self: os.Getpid(), ours: map[int]float64{}, started: time.Now()}
	busy, ok := machineBusy()
	w.firstBusy, w.lastBusy, w.ok = busy, busy, ok
	if !ok {
		return w
	}
	go every(ctx, time.Second, w.sample)
	return w
}

// every calls fn each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func (w *cpuWatcher) sample() {
	busy, ok := machineBusy()
	if !ok {
		return
	}
	procs := readProcs()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastBusy = busy
	for pid := range procs {
		if descends(procs, pid, w.self) {
			w.ours[pid] = procs[pid].cpu
		}
	}
}

// snapshot samples now and returns the machine's busy CPU seconds so far
// and this run's, cumulative.
func (w *cpuWatcher) snapshot() (busy, ours float64, at time.Time) {
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.ours {
		ours += s
	}
	return w.lastBusy, ours, time.Now()
}

// usage returns the CPU seconds the machine spent busy, the share of it
// that was this run's processes, and the wall time.
func (w *cpuWatcher) usage() (busy, ours float64, wall time.Duration, ok bool) {
	w.sample()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.ours {
		ours += s
	}
	return w.lastBusy - w.firstBusy, ours, time.Since(w.started), w.ok
}

type procInfo struct {
	name string
	ppid int
	cpu  float64
}

// processCPU is CPU seconds so far of the processes a throughput run
// loads: the kube-apiserver, etcd, and this process (the load generator,
// and for toolledger the SDK and the in-process manager).
type processCPU struct {
	APIServer, Etcd, Harness float64
}

func readProcessCPU() processCPU {
	procs := readProcs()
	self := os.Getpid()
	out := processCPU{Harness: procs[self].cpu}
	for pid, p := range procs {
		if pid == self || !descends(procs, pid, self) {
			continue
		}
		switch p.name {
		case "kube-apiserver":
			out.APIServer += p.cpu
		case "etcd":
			out.Etcd += p.cpu
		}
	}
	return out
}

// perOp is the CPU milliseconds per operation of n operations from before
// to c.
func (c processCPU) perOp(before processCPU, n int) processCPU {
	if n == 0 {
		return processCPU{}
	}
	ms := func(after, before float64) float64 { return (after - before) * 1000 / float64(n) }
	return processCPU{APIServer: ms(c.APIServer, before.APIServer), Etcd: ms(c.Etcd, before.Etcd), Harness: ms(c.Harness, before.Harness)}
}

func (c processCPU) total() float64 { return c.APIServer + c.Etcd + c.Harness }

func readProcs() map[int]procInfo {
	out := map[int]procInfo{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command may hold spaces and parentheses: fields start after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		open := strings.IndexByte(s, '(')
		if i < 0 || open < 0 || open > i {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[pid] = procInfo{name: s[open+1 : i], ppid: ppid, cpu: (utime + stime) / clockTicks}
	}
	return out
}

func descends(procs map[int]procInfo, pid, ancestor int) bool {
	for range 64 {
		if pid == ancestor {
			return true
		}
		p, ok := procs[pid]
		if !ok || p.ppid <= 1 {
			return false
		}
		pid = p.ppid
	}
	return false
}

// machineBusy is the CPU seconds all cores spent not idle, from /proc/stat.
func machineBusy() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	var busy float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 7 { // steal, guest, guest_nice: not this machine's work
			break
		}
		busy += n
	}
	return busy / clockTicks, true
}
