//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// binary returns the path of a binary that `make test-e2e` builds beside
// the control plane's.
func binary(name string) (string, error) {
	path := filepath.Join(testenv.BinDir(), name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing: run `make test-e2e`, which builds it: %w", path, err)
	}
	return path, nil
}

// --- OS processes -----------------------------------------------------------

// process is a child process in its own process group, so that a signal
// reaches everything it started. Its output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// processes tracks every child of the suite, to kill what is left even
// when the suite fails. ctx bounds them all.
type processes struct {
	ctx   context.Context
	mu    sync.Mutex
	all   []*process
	dir   string
	count int
}

// start runs path with args. onLine, when set, sees every line of its
// standard error (and output) as it is written.
func (ps *processes) start(name, path string, args []string, onLine func(string)) (*process, error) {
	ps.mu.Lock()
	ps.count++
	logPath := filepath.Join(ps.dir, fmt.Sprintf("%03d-%s.log", ps.count, name))
	ps.mu.Unlock()
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ps.ctx, path, args...)
	out := &lineWriter{w: logFile, onLine: onLine}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, killed with the group when the suite's time
	// is up; and killed with the suite's process should the suite die
	// without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("cannot start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

// killAll kills every process still running and waits for them.
func (ps *processes) killAll() {
	ps.mu.Lock()
	all := ps.all
	ps.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s has exited", p.name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group and waits for the process.
func (p *process) kill() {
	_ = p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stop asks the process to stop (SIGTERM) and kills it after grace.
func (p *process) stop(grace time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// tail returns the last n bytes of the process's log.
func (p *process) tail(n int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// lineWriter copies to w and hands every complete line to onLine.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	onLine func(string)
	buf    []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onLine != nil {
		l.buf = append(l.buf, p...)
		for {
			i := bytes.IndexByte(l.buf, '\n')
			if i < 0 {
				break
			}
			l.onLine(string(l.buf[:i]))
			l.buf = l.buf[i+1:]
		}
	}
	return l.w.Write(p)
}

// --- the control plane ------------------------------------------------------

// cluster is a kube-apiserver and etcd, started by envtest as processes,
// with certificates, ports and etcd data in fixed places so that either can
// be restarted under the clients' feet.
type cluster struct {
	plane *testenv.ControlPlane
	// cfg and kubeconfig are an admin (system:masters) user's.
	cfg        *rest.Config
	kubeconfig string
	client     client.Client
	// pidFile lists the control plane's processes for the watchdog, and
	// also those of other servers the suite started (PostgreSQL).
	pidFile  string
	also     []string
	watchdog *exec.Cmd
}

// startWatchdog runs a shell, in its own process group, that outlives the
// suite's process: once that process is gone, however it ended — even by
// go test's timeout, which runs no cleanup — it SIGKILLs the process groups
// listed in pidFile. envtest starts kube-apiserver and etcd in process
// groups of their own but without a parent-death signal, so nothing else
// would stop them.
func startWatchdog(pidFile string) (*exec.Cmd, error) {
	// A dead process that nobody reaped yet is a zombie: gone all the same.
	const script = `while [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; do sleep 1; done
[ -s "$2" ] && for pid in $(cat "$2"); do kill -KILL -- "-$pid" 2>/dev/null; done
exit 0`
	cmd := exec.CommandContext(context.Background(), "bash", "-c", script, "e2e-watchdog", strconv.Itoa(os.Getpid()), pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, cmd.Start()
}

// recordPIDs writes the process ids of the suite's own kube-apiserver and
// etcd children (found by parent and executable, in /proc) to the pid file.
func (c *cluster) recordPIDs() error {
	bin, err := filepath.EvalSymlinks(testenv.BinDir())
	if err != nil {
		return err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var pids []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the parenthesised command: state, then ppid.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && (exe == filepath.Join(bin, "kube-apiserver") || exe == filepath.Join(bin, "etcd")) {
			pids = append(pids, strconv.Itoa(pid))
		}
	}
	if len(pids) != 2 {
		return fmt.Errorf("found the control-plane processes %v, want kube-apiserver and etcd", pids)
	}
	return os.WriteFile(c.pidFile, []byte(strings.Join(append(pids, c.also...), " ")+"\n"), 0o600)
}

// watchAlso has the watchdog kill the process group of pid too, instead of
// any it was told of before: a server that runs in a process group of its
// own (PostgreSQL) and is restarted with a new one.
func (c *cluster) watchAlso(pid int) error {
	c.also = []string{strconv.Itoa(pid)}
	return c.recordPIDs()
}

func startCluster(dir string) (*cluster, error) {
	certDir, etcdDir := filepath.Join(dir, "apiserver"), filepath.Join(dir, "etcd")
	for _, d := range []string{certDir, etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	apiLog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, err
	}
	etcdLog, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	c := &cluster{pidFile: filepath.Join(dir, "controlplane.pids")}
	if c.watchdog, err = startWatchdog(c.pidFile); err != nil {
		return nil, fmt.Errorf("cannot start the watchdog: %w", err)
	}
	c.plane, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{
		// Fixed directories: a restarted API server keeps its port, serving
		// certificate and client CA, so every client keeps working; a
		// restarted etcd keeps its data.
		APIServerCertDir: certDir,
		EtcdDataDir:      etcdDir,
		APIServerLog:     apiLog,
		EtcdLog:          etcdLog,
		StartTimeout:     60 * time.Second,
		// A stop is a SIGTERM; whatever has not exited after stopGrace is
		// SIGKILLed. kube-apiserver's graceful shutdown with clients'
		// watches open often takes longer.
		StopTimeout: stopGrace,
	})
	if err != nil {
		_ = c.stop()
		return nil, err
	}
	if err := c.recordPIDs(); err != nil {
		_ = c.stop()
		return nil, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	if c.cfg, err = c.plane.AddAdmin("e2e-admin", c.kubeconfig); err != nil {
		_ = c.stop()
		return nil, err
	}
	c.cfg.QPS, c.cfg.Burst = 1000, 2000
	if c.client, err = client.New(c.cfg, client.Options{Scheme: app.Scheme()}); err != nil {
		_ = c.stop()
		return nil, err
	}
	return c, nil
}

// stop stops the control plane, then the watchdog.
func (c *cluster) stop() error {
	var err error
	if c.plane != nil {
		err = c.plane.Stop()
	}
	if c.watchdog != nil {
		_ = syscall.Kill(-c.watchdog.Process.Pid, syscall.SIGKILL)
		_ = c.watchdog.Wait()
	}
	return err
}

// stopGrace is how long a stopped control-plane process may take to exit
// before envtest SIGKILLs it.
const stopGrace = 2 * time.Second

// restart is what a control-plane restart did.
type restart struct {
	// unavailable is the time from the stop until ToolActions were served again.
	unavailable time.Duration
	// killed: the process did not exit within stopGrace of its SIGTERM.
	killed bool
}

// controlPlaneProcess is the part of envtest's APIServer and Etcd a restart uses.
type controlPlaneProcess interface {
	Start() error
	Stop() error
}

// restartAPIServer stops kube-apiserver, keeps it down for down, starts it
// again on the same port with the same certificates, and waits until
// ToolActions are served again.
func (c *cluster) restartAPIServer(ctx context.Context, down time.Duration) (restart, error) {
	return c.restart(ctx, "kube-apiserver", c.plane.Env.ControlPlane.APIServer, down)
}

// restartEtcd stops etcd, keeps it down for down and starts it again with
// its data.
func (c *cluster) restartEtcd(ctx context.Context, down time.Duration) (restart, error) {
	return c.restart(ctx, "etcd", c.plane.Env.ControlPlane.Etcd, down)
}

func (c *cluster) restart(ctx context.Context, name string, p controlPlaneProcess, down time.Duration) (restart, error) {
	var r restart
	began := time.Now()
	if err := p.Stop(); err != nil {
		if !strings.Contains(err.Error(), "timeout waiting for process") {
			return r, fmt.Errorf("cannot stop %s: %w", name, err)
		}
		// envtest sent SIGKILL after the grace period.
		r.killed = true
	}
	if err := testenv.Sleep(ctx, down); err != nil {
		return r, err
	}
	// A killed process may hold its port for a moment: try again, a few times.
	var err error
	for range 5 {
		if err = p.Start(); err == nil {
			break
		}
		if testenv.Sleep(ctx, time.Second) != nil {
			break
		}
	}
	if err != nil {
		return r, fmt.Errorf("cannot start %s again: %w", name, err)
	}
	if err := c.recordPIDs(); err != nil {
		return r, err
	}
	if err := c.waitServing(ctx); err != nil {
		return r, err
	}
	r.unavailable = time.Since(began)
	return r, nil
}

// waitServing waits until the API server lists ToolActions, the CRD's
// endpoints included.
func (c *cluster) waitServing(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		var list v1alpha1.ToolActionList
		err := c.client.List(ctx, &list, client.InNamespace("default"), client.Limit(1))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not serve ToolActions again: %w", err)
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// --- the demo downstream ----------------------------------------------------

// downstream is a demo downstream process and a client of its admin API.
type downstream struct {
	name  string
	naive bool
	url   string
	proc  *process
	http  *http.Client
}

var listeningAddr = regexp.MustCompile(`msg="demo downstream listening" addr=(\S+)`)

// startDownstream runs bin/demo-downstream on a free port of 127.0.0.1.
func (ps *processes) startDownstream(name string, naive bool) (*downstream, error) {
	path, err := binary("demo-downstream")
	if err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	args := []string{"--listen=127.0.0.1:0"}
	if naive {
		args = append(args, "--naive")
	}
	p, err := ps.start("downstream-"+name, path, args, func(line string) {
		if m := listeningAddr.FindStringSubmatch(line); m != nil {
			select {
			case addr <- m[1]:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case a := <-addr:
		return &downstream{
			name: name, naive: naive, url: "http://" + a, proc: p,
			http: &http.Client{Timeout: 10 * time.Second},
		}, nil
	case <-p.done:
		return nil, fmt.Errorf("the downstream %s exited: %w\n%s", name, p.err, p.tail(2000))
	case <-time.After(15 * time.Second):
		p.kill()
		return nil, fmt.Errorf("the downstream %s did not report its address", name)
	}
}

// send sends a request to the downstream and reads the whole answer.
func (d *downstream) send(ctx context.Context, method, path string, body []byte, header http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// inject queues faults, in order.
func (d *downstream) inject(ctx context.Context, faults ...demo.Fault) error {
	for _, f := range faults {
		body, err := json.Marshal(f)
		if err != nil {
			return err
		}
		status, answer, err := d.send(ctx, http.MethodPost, "/_admin/faults", body, http.Header{"Content-Type": {"application/json"}})
		if err != nil {
			return fmt.Errorf("cannot inject %s: %w", body, err)
		}
		if status != http.StatusNoContent {
			return fmt.Errorf("injecting %s: status %d: %s", body, status, answer)
		}
	}
	return nil
}

func (d *downstream) clearFaults(ctx context.Context) error {
	status, body, err := d.send(ctx, http.MethodDelete, "/_admin/faults", nil, nil)
	if err == nil && status != http.StatusNoContent {
		err = fmt.Errorf("clearing faults: status %d: %s", status, body)
	}
	return err
}

// stats is the downstream's /_admin/stats.
type stats struct {
	Requests      map[string]int `json:"requests"`
	Effects       map[string]int `json:"effects"`
	TotalRequests int            `json:"totalRequests"`
	TotalEffects  int            `json:"totalEffects"`
	// InProgress are the keys with a request being processed.
	InProgress []string `json:"inProgress"`
}

func (d *downstream) stats(ctx context.Context) (stats, error) {
	var s stats
	status, body, err := d.send(ctx, http.MethodGet, "/_admin/stats", nil, nil)
	if err != nil {
		return s, err
	}
	if status != http.StatusOK {
		return s, fmt.Errorf("stats: status %d: %s", status, body)
	}
	return s, json.Unmarshal(body, &s)
}

// lookup asks the downstream for the charge of key: 200 with the charge
// (the first, for a naive downstream), 404, or 409 while a request for the
// key is in progress.
func (d *downstream) lookup(ctx context.Context, key string) (int, Charge, error) {
	status, body, err := d.send(ctx, http.MethodGet, "/charges/by-key/"+url.PathEscape(key), nil, nil)
	if err != nil || status != http.StatusOK {
		return status, Charge{}, err
	}
	var c demo.Charge
	if err := json.Unmarshal(body, &c); err != nil {
		return status, Charge{}, fmt.Errorf("lookup of %s: %w", key, err)
	}
	return status, Charge{ID: c.ID, Amount: c.Amount}, nil
}

// charge posts a charge directly, as toolledger would, for the self-check.
func (d *downstream) charge(ctx context.Context, key string, amount int64) (int, error) {
	body := fmt.Appendf(nil, `{"amount":%d,"currency":"EUR"}`, amount)
	status, _, err := d.send(ctx, http.MethodPost, "/charges", body, http.Header{
		"Content-Type": {"application/json"}, "Idempotency-Key": {fmt.Sprintf("%q", key)},
	})
	return status, err
}

// --- managers -----------------------------------------------------------------

// manager is a bin/manager process with its own executor identity.
type manager struct {
	id    string
	proc  *process
	ready chan struct{}
	// probeAddr and archiveAPIAddr receive where its health probes and
	// its archive API listen, as it logs them.
	probeAddr, archiveAPIAddr chan string
}

// Where a manager told to listen on 127.0.0.1:0 listens, from its log: the
// kernel chooses a port as the server listens, whereas a port picked free
// beforehand could be taken by another program before the server listens.
var (
	probeListening      = regexp.MustCompile(`"msg":"starting server".*"name":"health probe".*"addr":"([^"]+)"`)
	archiveAPIListening = regexp.MustCompile(`"msg":"Serving the archive API".*"address":"([^"]+)"`)
)

// startManager runs bin/manager against the cluster as the admin user,
// without metrics or probes listening and without leader election; extra
// flags follow the suite's own.
func (ps *processes) startManager(kubeconfig, id string, extra ...string) (*manager, error) {
	path, err := binary("manager")
	if err != nil {
		return nil, err
	}
	m := &manager{id: id, ready: make(chan struct{}), probeAddr: make(chan string, 1), archiveAPIAddr: make(chan string, 1)}
	var once sync.Once
	m.proc, err = ps.start("manager-"+id, path, append([]string{
		"--kubeconfig=" + kubeconfig,
		"--executor-id=" + id,
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--lease-grace=" + leaseGrace.String(),
		"--member-lease-duration=" + memberLeaseDuration.String(),
		"--max-concurrent-reconciles=8",
		// The downstreams listen on 127.0.0.1; nothing else is reachable.
		"--egress-allow=127.0.0.1/32",
	}, extra...), func(line string) {
		// Workers start once the caches are synced: from then on the
		// manager claims what it sees.
		if strings.Contains(line, "Starting workers") && strings.Contains(line, `"controller":"toolaction"`) {
			once.Do(func() { close(m.ready) })
		}
		for re, addr := range map[*regexp.Regexp]chan string{probeListening: m.probeAddr, archiveAPIListening: m.archiveAPIAddr} {
			if found := re.FindStringSubmatch(line); found != nil {
				select {
				case addr <- found[1]:
				default:
				}
			}
		}
	})
	return m, err
}

// listening waits until the manager says where the server of addr (its
// probeAddr or archiveAPIAddr) listens.
func (m *manager) listening(ctx context.Context, addr chan string) (string, error) {
	select {
	case a := <-addr:
		addr <- a
		return a, nil
	case <-m.proc.done:
		return "", fmt.Errorf("manager %s exited: %w\n%s", m.id, m.proc.err, m.proc.tail(3000))
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(60 * time.Second):
		return "", fmt.Errorf("manager %s did not say where it listens within a minute:\n%s", m.id, m.proc.tail(3000))
	}
}

// waitReady waits until the manager's ToolAction workers run.
func (m *manager) waitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-m.proc.done:
		return fmt.Errorf("manager %s exited: %w\n%s", m.id, m.proc.err, m.proc.tail(3000))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(60 * time.Second):
		return fmt.Errorf("manager %s did not start its workers within a minute:\n%s", m.id, m.proc.tail(3000))
	}
}

// --- tenants and tools ----------------------------------------------------------

// toolOptions shape the Tool "charge" of a tenant.
type toolOptions struct {
	class v1alpha1.IdempotencyClass
	// lookup adds the downstream's lookup by key.
	lookup bool
	// committedLookup adds the downstream's lookup of committed charges
	// instead, whose 404 a request in progress contradicts later.
	committedLookup bool
	// deadline is the tool's unknownOutcomeDeadline; 30s when zero.
	deadline time.Duration
	// maxAttempts is the tool's retry.maxAttempts; 8 when zero.
	maxAttempts int32
	// approval makes the tool require an approval.
	approval bool
	// recordRetention is the tool's recordRetention; unset when zero.
	recordRetention time.Duration
}

const toolTimeout = time.Second

// tenantTool is the Tool "charge" of a tenant in namespace ns: it calls d
// as opts say.
func tenantTool(ns string, d *downstream, opts toolOptions) *v1alpha1.Tool {
	if opts.deadline == 0 {
		opts.deadline = 30 * time.Second
	}
	if opts.maxAttempts == 0 {
		opts.maxAttempts = 8
	}
	shape := []testenv.ToolOption{
		testenv.WithClass(opts.class), testenv.WithTimeout(toolTimeout), testenv.WithResultPointers("/amount"),
		testenv.WithMaxAttempts(opts.maxAttempts), testenv.WithBackoff(200*time.Millisecond, time.Second),
		testenv.WithUnknownOutcomeDeadline(opts.deadline),
	}
	if opts.lookup {
		shape = append(shape, testenv.WithKeyLookup())
	}
	if opts.committedLookup {
		shape = append(shape, testenv.WithCommittedLookup())
	}
	if opts.approval {
		shape = append(shape, testenv.WithApprovalRequired())
	}
	if opts.recordRetention > 0 {
		shape = append(shape, testenv.WithRecordRetention(opts.recordRetention))
	}
	return testenv.NewTool(ns, "charge", d.url+"/charges", shape...)
}

// newTenant creates a namespace (the tenant) with a Tool "charge" that calls d.
func newTenant(ctx context.Context, c client.Client, scenario string, d *downstream, opts toolOptions) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-" + scenario + "-",
		Labels:       map[string]string{"e2e.toolledger.dev/scenario": scenario},
	}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("cannot create a tenant: %w", err)
	}
	tool := tenantTool(ns.Name, d, opts)
	if err := c.Create(ctx, tool); err != nil {
		return "", fmt.Errorf("cannot create the tool of %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}
