//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/controllers"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// A Job removed by its TTL after the apply's answer was lost: the
// kubernetesApply tool server-side applies a Job with
// ttlSecondsAfterFinished: 0; the API server creates it, the answer never
// reaches the manager, and the Job is gone before the lookup. Its absence
// proves nothing for a Compensatable tool: the action must escalate, never
// apply again, and the API server must have created the Job once. An
// operator then closes it with `kubectl toolledger resolve`.
//
// The e2e control plane runs no Job or TTL controller: the suite plays the
// TTL controller, deleting every Job 0–500ms after the API server created
// it. The managers of this scenario reach the API server through
// answerLosingProxy, which drops the answer to the first apply of each
// intent once the API server committed it and the Job is gone. Jobs
// created are counted by a watch of the API server's, never by the
// manager.

const (
	jobParallel = 4
	// jobDeadline is the tool's unknownOutcomeDeadline.
	jobDeadline = 3 * time.Second
	// ttlDelay bounds how long after its creation the suite deletes a Job.
	ttlDelay = 500 * time.Millisecond
	// resolver is the operator who closes the escalations, bound to the
	// shipped toolledger-resolver role in each trial's namespace.
	resolver       = "carol"
	resolverReason = "e2e: the Job ran, then its TTL removed it"
)

// jobTrials is how many trials the scenario runs: two in five of
// E2E_TRIALS, at least 20.
func (s *suite) jobTrials() int { return max(s.trials*2/5, 20) }

func jobTTLLostAnswer(s *suite, sc *run) error {
	for _, file := range []string{"role_impersonator.yaml", "toolresolution_resolver_role.yaml"} {
		if err := testenv.ApplyFile(s.ctx, s.cluster.cfg, filepath.Join("..", "..", "config", "rbac", file), "e2e"); err != nil {
			return err
		}
	}
	watcher, err := client.NewWithWatch(s.cluster.cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return err
	}
	proxy, err := startAnswerLosingProxy(s.cluster.cfg)
	if err != nil {
		return err
	}
	defer proxy.close()
	kubeconfig := filepath.Join(s.dir, "kubeconfig-"+sc.name)
	if err := proxy.writeKubeconfig(kubeconfig); err != nil {
		return err
	}
	// Managers share the actions by key: every manager must reach the API
	// server through the proxy, or some applies would keep their answers.
	if err := s.stopSteadyManagers(); err != nil {
		return err
	}
	var pool []*manager
	defer stopAll(&pool)
	for range 2 {
		m, err := s.procs.startManager(kubeconfig, s.nextManagerID("proxied"))
		if err != nil {
			return err
		}
		pool = append(pool, m)
		if err := m.waitReady(s.ctx); err != nil {
			return err
		}
	}

	var (
		counts tally
		jobs   = map[int]int{} // Jobs created per key → keys
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
	)
	sem := make(chan struct{}, jobParallel)
	n := s.jobTrials()
	for i := range n {
		if s.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			created, err := s.jobTrial(sc, proxy, watcher, s.rngFor(sc.name, i), &counts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("trial %d: %w", i, err))
			}
			for _, c := range created {
				jobs[c]++
			}
		})
		if (i+1)%10 == 0 {
			s.logf("%s: %d/%d trials started", sc.name, i+1, n)
		}
	}
	wg.Wait()
	perKey := make([]string, 0, len(jobs))
	for _, c := range slices.Sorted(maps.Keys(jobs)) {
		perKey = append(perKey, fmt.Sprintf("%d keys with %d", jobs[c], c))
	}
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("answers to the first apply of each intent dropped after the API server committed it and the Job was deleted: %d; "+
			"proxy holds that waited out %s without seeing the deletion: %d", proxy.lost.Load(), holdLimit, proxy.overdue.Load()),
		"Jobs the API server created per key (its watch's ADDED events): "+strings.Join(perKey, ", "),
		counts.String(), s.paths(sc))
	return errors.Join(errs...)
}

// stopSteadyManagers stops the managers that talk to the API server
// directly; steadyManagers starts new ones when a later scenario needs
// them. Any other manager still running is an error: it would take a
// share of the actions and keep its answers.
func (s *suite) stopSteadyManagers() error {
	s.mu.Lock()
	steady := s.steady
	s.steady = [2]*manager{}
	s.mu.Unlock()
	for _, m := range steady {
		if m != nil {
			m.proc.stop(10 * time.Second)
		}
	}
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	for _, p := range s.procs.all {
		if strings.HasPrefix(p.name, "manager-") && !p.exited() {
			return fmt.Errorf("%s still runs and reaches the API server directly", p.name)
		}
	}
	return nil
}

// jobTrial is one tenant of 1–3 intents of the Job tool, each first apply
// losing its answer. It returns the Jobs created per key.
func (s *suite) jobTrial(sc *run, proxy *answerLosingProxy, watcher client.WithWatch, rng *rand.Rand, counts *tally) ([]int, error) {
	tr, err := s.newJobTenant(sc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	// The API server's count, from before the first intent.
	w, err := s.watchJobs(ctx, watcher, tr.ns, rng)
	if err != nil {
		return nil, err
	}
	keys := make([]string, intRange(rng, 1, 3))
	for i := range keys {
		keys[i] = tr.add(fmt.Sprintf("report-%02d", i), 0)
		proxy.loseFirstApply(tr.ns, keys[i], w.waitGone)
	}
	var agents sync.WaitGroup
	for _, key := range keys {
		agents.Go(func() {
			out, err := s.invoke(ctx, sdk.Request{Namespace: tr.ns, Key: key, Tool: "report", Parameters: map[string]any{"name": key}})
			switch {
			case err != nil:
				tr.violation(key, "the agent got no outcome: %v", err)
			case !out.Phase.IsSettled():
				tr.violation(key, "Invoke returned unsettled phase %q", out.Phase)
			}
		})
	}
	agents.Wait()
	settled, err := s.jobActions(ctx, tr)
	if err != nil {
		return nil, err
	}
	for _, key := range keys {
		s.resolveEscalated(ctx, tr, key, settled[key], counts)
	}
	// A second Job, were one applied after the resolution, would show up
	// within a lookup's time.
	if err := testenv.Sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	resolved, err := s.jobActions(ctx, tr)
	if err != nil {
		return nil, err
	}
	created, err := w.stop()
	if err != nil {
		return nil, err
	}
	s.checkJobTrial(sc, tr, settled, resolved, created)
	out := make([]int, 0, len(keys))
	for _, key := range keys {
		out = append(out, created[tr.ns+"/"+key])
	}
	return out, nil
}

// newJobTenant creates a namespace whose Tool "report" applies a Job named
// by the parameter "name", as the ServiceAccount "runner", which may get,
// create and patch Jobs. The manager is bound to the shipped impersonator
// role as docs/adapters.md says (the e2e manager, in system:masters, may
// impersonate anyone anyway), and the operator carol to the resolver role.
func (s *suite) newJobTenant(sc *run) (*trial, error) {
	c := s.cluster.client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-" + sc.name + "-",
		Labels:       map[string]string{"e2e.toolledger.dev/scenario": sc.name},
	}}
	if err := c.Create(s.ctx, ns); err != nil {
		return nil, fmt.Errorf("cannot create a tenant: %w", err)
	}
	tr := &trial{ns: ns.Name}
	s.mu.Lock()
	sc.trials = append(sc.trials, tr)
	s.mu.Unlock()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: "runner-jobs"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "create", "patch"}}},
	}
	objects := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: "runner"}},
		role,
		binding(tr.ns, "Role", role.Name, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "runner", Namespace: tr.ns}),
		binding(tr.ns, "ClusterRole", "toolledger-impersonator", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "e2e-admin"}),
		binding(tr.ns, "ClusterRole", "toolledger-resolver", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: resolver}),
		&v1alpha1.Tool{
			ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: "report"},
			Spec: v1alpha1.ToolSpec{
				Operation: "reports.run", Version: "v1", IdempotencyClass: v1alpha1.Compensatable,
				UnknownOutcomeDeadline: &metav1.Duration{Duration: jobDeadline},
				Retry: v1alpha1.RetryPolicy{MaxAttempts: 8, InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond},
					MaxBackoff: &metav1.Duration{Duration: time.Second}},
				KubernetesApply: &v1alpha1.KubernetesApplyAdapter{
					ServiceAccountName: "runner", Timeout: &metav1.Duration{Duration: toolTimeout},
					Template: apiextensionsv1.JSON{Raw: []byte(`{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "{{name}}"},
					  "spec": {"ttlSecondsAfterFinished": 0, "template": {"spec": {"restartPolicy": "Never",
					    "containers": [{"name": "run", "image": "example.invalid/report:1"}]}}}}`)},
				},
			},
		},
	}
	for _, obj := range objects {
		if err := c.Create(s.ctx, obj); err != nil {
			return nil, fmt.Errorf("cannot create %T %s in %s: %w", obj, obj.GetName(), tr.ns, err)
		}
	}
	return tr, nil
}

// binding binds the role of kind ("Role" or "ClusterRole") to subject in
// namespace.
func binding(namespace, kind, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: strings.ToLower(kind) + "-" + role + "-" + strings.ToLower(subject.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
}

// jobActions reads the trial's actions from the API server, by key.
func (s *suite) jobActions(ctx context.Context, tr *trial) (map[string]*v1alpha1.ToolAction, error) {
	var list v1alpha1.ToolActionList
	if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
		return nil, fmt.Errorf("cannot list the actions of %s: %w", tr.ns, err)
	}
	out := make(map[string]*v1alpha1.ToolAction, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// jobRef is the external reference of the Job of key.
func jobRef(ns, key string) string { return "jobs.batch/" + ns + "/" + key }

// resolveEscalated checks that the action escalated because the Job's
// absence proves nothing, after one attempt, and has carol resolve it as
// Succeeded with `kubectl toolledger resolve`.
func (s *suite) resolveEscalated(ctx context.Context, tr *trial, key string, a *v1alpha1.ToolAction, counts *tally) {
	if a == nil {
		return // lost: the check reports it
	}
	if a.Status.Phase != v1alpha1.PhaseEscalated {
		counts.add("settled "+string(a.Status.Phase)+" without escalating", 1)
		if a.Status.Phase != v1alpha1.PhaseSucceeded || a.Status.Attempts != 1 {
			tr.violation(key, "%s after %d attempts; want Escalated after 1 (or Succeeded by a lookup that found the Job before its deletion)",
				a.Status.Phase, a.Status.Attempts)
		}
		return
	}
	counts.add("escalated", 1)
	e := a.Status.Error
	const finding = "does not exist, which proves nothing for a tool of this class"
	if e == nil || e.Reason != controllers.ReasonOutcomeUnknown || !strings.Contains(e.Message, jobRef(tr.ns, key)+" "+finding) || a.Status.Attempts != 1 {
		tr.violation(key, "escalated after %d attempts with %+v; want 1 attempt, reason %s and %q", a.Status.Attempts, e, controllers.ReasonOutcomeUnknown, finding)
	}
	out, err := s.toolledger(ctx, resolver, "resolve", key, "-n", tr.ns, "--attempt", fmt.Sprint(a.Status.Attempts),
		"--outcome", string(v1alpha1.ResolvedSucceeded), "--external-ref", jobRef(tr.ns, key), "--reason", resolverReason, "--wait")
	if err != nil || !strings.Contains(out, "Applied=True") || !strings.Contains(out, "is now Succeeded") {
		tr.violation(key, "kubectl toolledger resolve --as=%s: want Applied=True and Succeeded, got %v: %s", resolver, err, out)
		return
	}
	counts.add("resolved Succeeded by kubectl toolledger resolve", 1)
}

// checkJobTrial checks the trial twice against the Jobs the API server
// created: as the intents settled (the row's counts), and once resolved,
// when every escalated intent must have become Succeeded, naming its Job,
// with still one Job created (only the violations count: the row has
// the keys and effects already).
func (s *suite) checkJobTrial(sc *run, tr *trial, settled, resolved map[string]*v1alpha1.ToolAction, created map[string]int) {
	evidence := func(actions map[string]*v1alpha1.ToolAction) (map[string]Action, map[string]Charge) {
		checked, refs := map[string]Action{}, map[string]Charge{}
		for name, a := range actions {
			checked[tr.ns+"/"+name] = toAction(a)
			refs[tr.ns+"/"+name] = Charge{ID: jobRef(tr.ns, name)}
		}
		return checked, refs
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	actions, refs := evidence(settled)
	first := Check(Trial{Name: tr.ns, Prefix: tr.ns + "/", Keys: tr.keys, Amounts: tr.amounts,
		Actions: actions, Effects: created, Charges: refs, Extra: tr.extra})
	actions, refs = evidence(resolved)
	then := Check(Trial{Name: tr.ns, Prefix: tr.ns + "/", Keys: tr.keys, Amounts: tr.amounts,
		Actions: actions, Effects: created, Charges: refs})
	for _, v := range then.Violations {
		if v.Kind != Duplicate {
			first.Violations = append(first.Violations, v)
		}
	}
	for key, a := range actions {
		if a.Phase != PhaseSucceeded {
			first.Violations = append(first.Violations, Violation{Kind: DriverObserved, Key: key, Detail: fmt.Sprintf("%s once resolved; want Succeeded", a.Phase)})
		}
	}
	s.mu.Lock()
	sc.row.Add(first)
	s.mu.Unlock()
	for _, v := range first.Violations {
		s.t.Errorf("%s: trial %s: %s%s", sc.name, tr.ns, v, s.history(v.Key))
	}
}

// --- the API server's count of Jobs, and the TTL controller -------------------------

// jobWatch counts the Jobs the API server creates in a namespace, by name,
// and deletes each 0–500ms after its creation, as the TTL controller does
// with a finished Job of ttlSecondsAfterFinished: 0.
type jobWatch struct {
	w        watch.Interface
	c        client.Client
	ns       string
	done     chan struct{}
	deletes  sync.WaitGroup
	mu       sync.Mutex
	rng      *rand.Rand
	created  map[string]int
	gone     map[string]chan struct{}
	ended    error
	stopping bool
}

func (s *suite) watchJobs(ctx context.Context, watcher client.WithWatch, ns string, rng *rand.Rand) (*jobWatch, error) {
	w, err := watcher.Watch(ctx, &batchv1.JobList{}, client.InNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("cannot watch the Jobs of %s: %w", ns, err)
	}
	jw := &jobWatch{w: w, c: s.cluster.client, ns: ns, done: make(chan struct{}), rng: rng,
		created: map[string]int{}, gone: map[string]chan struct{}{}}
	go jw.run(s.ctx)
	return jw, nil
}

func (jw *jobWatch) run(ctx context.Context) {
	defer close(jw.done)
	for e := range jw.w.ResultChan() {
		switch e.Type {
		case watch.Added:
			job, ok := e.Object.(*batchv1.Job)
			if !ok {
				continue
			}
			jw.mu.Lock()
			jw.created[job.Name]++
			delay := between(jw.rng, 0, ttlDelay)
			jw.mu.Unlock()
			jw.deletes.Go(func() { jw.expire(ctx, job.Name, delay) })
		case watch.Deleted:
			job, ok := e.Object.(*batchv1.Job)
			if !ok {
				continue
			}
			jw.mu.Lock()
			ch := jw.goneLocked(job.Name)
			select {
			case <-ch:
			default:
				close(ch)
			}
			jw.mu.Unlock()
		case watch.Error:
			// Stopping the watch closes its stream, which client-go reports
			// as an error event.
			jw.mu.Lock()
			if !jw.stopping {
				jw.ended = fmt.Errorf("the watch of the Jobs of %s failed: %w", jw.ns, apierrors.FromObject(e.Object))
			}
			jw.mu.Unlock()
		}
	}
	jw.mu.Lock()
	defer jw.mu.Unlock()
	if !jw.stopping && jw.ended == nil {
		jw.ended = fmt.Errorf("the watch of the Jobs of %s ended early: the count of Jobs created is incomplete", jw.ns)
	}
}

// expire deletes the Job, in the background as the TTL controller does.
func (jw *jobWatch) expire(ctx context.Context, name string, after time.Duration) {
	if testenv.Sleep(ctx, after) != nil {
		return
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: jw.ns, Name: name}}
	if err := jw.c.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		jw.mu.Lock()
		jw.ended = errors.Join(jw.ended, fmt.Errorf("cannot delete the Job %s/%s as its TTL would: %w", jw.ns, name, err))
		jw.mu.Unlock()
	}
}

func (jw *jobWatch) goneLocked(name string) chan struct{} {
	ch, ok := jw.gone[name]
	if !ok {
		ch = make(chan struct{})
		jw.gone[name] = ch
	}
	return ch
}

// waitGone waits until the Job name was deleted, for at most limit; it
// reports whether it was.
func (jw *jobWatch) waitGone(name string, limit time.Duration) bool {
	jw.mu.Lock()
	ch := jw.goneLocked(name)
	jw.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-time.After(limit):
		return false
	}
}

// stop ends the watch, waits for the deletions it started and returns the
// Jobs created by key (<namespace>/<name>).
func (jw *jobWatch) stop() (map[string]int, error) {
	jw.mu.Lock()
	jw.stopping = true
	jw.mu.Unlock()
	jw.w.Stop()
	<-jw.done
	jw.deletes.Wait()
	jw.mu.Lock()
	defer jw.mu.Unlock()
	out := make(map[string]int, len(jw.created))
	for name, n := range jw.created {
		out[jw.ns+"/"+name] = n
	}
	return out, jw.ended
}

// --- the proxy that loses answers ---------------------------------------------------

// holdLimit bounds how long the proxy holds a lost answer waiting for the
// Job's deletion.
const holdLimit = 3 * time.Second

// errAnswerLost ends a request whose answer the proxy drops.
var errAnswerLost = errors.New("the answer is lost")

// answerLosingProxy is a reverse proxy on 127.0.0.1, plain HTTP, in front of
// the API server, which it reaches as the e2e admin. It forwards every
// request and answer unchanged (Impersonate-* headers, watches), except the
// first server-side apply of each Job it was told about: that one reaches
// the API server, and once the API server answered that it applied the Job
// and the Job was deleted, the proxy closes the client's connection without
// an answer.
type answerLosingProxy struct {
	listener net.Listener
	server   *http.Server
	forward  *httputil.ReverseProxy
	lose     *httputil.ReverseProxy

	mu sync.Mutex
	// armed holds, by <namespace>/<name>, what to wait for before dropping
	// the answer to the Job's first apply.
	armed map[string]func(name string, limit time.Duration) bool

	lost, overdue atomic.Int32
}

func startAnswerLosingProxy(admin *rest.Config) (*answerLosingProxy, error) {
	upstream, err := url.Parse(admin.Host)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the API server's address %q: %w", admin.Host, err)
	}
	transport, err := rest.TransportFor(admin)
	if err != nil {
		return nil, fmt.Errorf("cannot build the proxy's transport: %w", err)
	}
	var lc net.ListenConfig
	listener, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &answerLosingProxy{listener: listener, armed: map[string]func(string, time.Duration) bool{}}
	rewrite := func(r *httputil.ProxyRequest) { r.SetURL(upstream) }
	// FlushInterval -1: watches stream through as the API server writes them.
	p.forward = &httputil.ReverseProxy{Rewrite: rewrite, Transport: transport, FlushInterval: -1}
	p.lose = &httputil.ReverseProxy{Rewrite: rewrite, Transport: transport, FlushInterval: -1,
		ModifyResponse: p.dropApplied,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errAnswerLost) {
				// net/http closes the connection without writing anything.
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(listener) }()
	return p, nil
}

func (p *answerLosingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.armedFor(r) != "" {
		p.lose.ServeHTTP(w, r)
		return
	}
	p.forward.ServeHTTP(w, r)
}

// loseFirstApply makes the proxy drop the answer to the first server-side
// apply of the Job ns/name that the API server accepts, once gone reports
// the Job deleted (or holdLimit passed).
func (p *answerLosingProxy) loseFirstApply(ns, name string, gone func(name string, limit time.Duration) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed[ns+"/"+name] = gone
}

// armedFor returns the <namespace>/<name> of the Job that r server-side
// applies when its answer is to be lost, else "".
func (p *answerLosingProxy) armedFor(r *http.Request) string {
	if r.Method != http.MethodPatch {
		return ""
	}
	if media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || media != "application/apply-patch+yaml" {
		return ""
	}
	tail, ok := strings.CutPrefix(r.URL.Path, "/apis/batch/v1/namespaces/")
	parts := strings.Split(tail, "/")
	if !ok || len(parts) != 3 || parts[1] != "jobs" {
		return ""
	}
	key := parts[0] + "/" + parts[2]
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.armed[key]; !ok {
		return ""
	}
	return key
}

// dropApplied lets an answer that did not apply through and keeps the
// Job's mark; it turns one that did, once the Job is gone, into
// errAnswerLost.
func (p *answerLosingProxy) dropApplied(resp *http.Response) error {
	if resp.StatusCode/100 != 2 {
		return nil
	}
	key := p.armedFor(resp.Request)
	p.mu.Lock()
	gone, ok := p.armed[key]
	delete(p.armed, key)
	p.mu.Unlock()
	if !ok {
		return nil // another apply of the Job lost its answer meanwhile
	}
	_, name, _ := strings.Cut(key, "/")
	if !gone(name, holdLimit) {
		p.overdue.Add(1)
	}
	p.lost.Add(1)
	return errAnswerLost
}

// writeKubeconfig writes a kubeconfig that reaches the API server through
// the proxy, with no credentials of its own: the proxy adds the admin's.
func (p *answerLosingProxy) writeKubeconfig(path string) error {
	const name = "e2e-answer-losing-proxy"
	config := clientcmdapi.NewConfig()
	config.Clusters[name] = &clientcmdapi.Cluster{Server: "http://" + p.listener.Addr().String()}
	config.AuthInfos[name] = &clientcmdapi.AuthInfo{}
	config.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	config.CurrentContext = name
	return clientcmd.WriteToFile(*config, path)
}

// close closes the listener and every connection at once.
func (p *answerLosingProxy) close() { _ = p.server.Close() }
