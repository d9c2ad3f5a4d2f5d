package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(offset time.Duration) metav1.Time { return metav1.NewTime(now.Add(offset)) }

func timePtr(offset time.Duration) *metav1.Time {
	t := at(offset)
	return &t
}

func TestResolveOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts resolveOptions
		want []string // substrings of the error; none means valid
	}{
		{name: "succeeded", opts: resolveOptions{attempt: 1, outcome: "Succeeded", externalRef: "ch_1", reason: "seen in the dashboard"}},
		{name: "failed", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "provider has no record"}},
		{name: "retry safe with a name and a wait", opts: resolveOptions{attempt: 1, outcome: "RetrySafe", reason: "r", name: "order-1-checked", wait: true, timeout: time.Second}},
		{name: "no reason", opts: resolveOptions{attempt: 1, outcome: "Failed"}, want: []string{"--reason is required"}},
		{name: "blank reason", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "  "}, want: []string{"--reason is required"}},
		{name: "succeeded without a reference", opts: resolveOptions{attempt: 1, outcome: "Succeeded", reason: "r"}, want: []string{"--outcome Succeeded needs --external-ref"}},
		{name: "reference on a failure", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "r", externalRef: "ch_1"}, want: []string{"--external-ref goes only with --outcome Succeeded"}},
		{name: "no outcome", opts: resolveOptions{attempt: 1, reason: "r"}, want: []string{"--outcome is required"}},
		{name: "unknown outcome", opts: resolveOptions{attempt: 1, outcome: "succeeded", reason: "r"}, want: []string{`not "succeeded"`}},
		{name: "every problem at once", opts: resolveOptions{attempt: 1, outcome: "Succeeded"}, want: []string{"--external-ref", "--reason is required", "nothing was created"}},
		{name: "reason too long", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: strings.Repeat("x", maxReasonLength+1)}, want: []string{"--reason is 1025 bytes long"}},
		{name: "reference too long", opts: resolveOptions{attempt: 1, outcome: "Succeeded", reason: "r", externalRef: strings.Repeat("x", maxExternalRefLength+1)}, want: []string{"--external-ref is 513 bytes long"}},
		{name: "bad name", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "r", name: "Not_A_Name"}, want: []string{`--name "Not_A_Name" cannot name a ToolResolution`}},
		{name: "no time to wait", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "r", wait: true}, want: []string{"--timeout must be positive"}},
		{name: "no attempt", opts: resolveOptions{outcome: "Failed", reason: "r"}, want: []string{"--attempt is required: the attempt you judged"}},
		{name: "name too long for the history", opts: resolveOptions{attempt: 1, outcome: "Failed", reason: "r", name: strings.Repeat("a", 239)},
			want: []string{"--name is 239 characters long; a ToolResolution's name has at most 238"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("validate() = %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate() = nil, want an error containing %q", tt.want)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestResolutionName(t *testing.T) {
	generated := resolveOptions{outcome: "Failed", reason: "r"}.resolution("shop", "order-1")
	if generated.Name != "" || generated.GenerateName != "order-1-resolution-" {
		t.Errorf("default name: name %q, generateName %q; want the server to generate order-1-resolution-<suffix>", generated.Name, generated.GenerateName)
	}
	named := resolveOptions{outcome: "Failed", reason: "r", name: "checked"}.resolution("shop", "order-1")
	if named.Name != "checked" || named.GenerateName != "" {
		t.Errorf("--name: name %q, generateName %q; want checked and no generated name", named.Name, named.GenerateName)
	}
	if named.Namespace != "shop" || named.Spec.ActionName != "order-1" || named.Spec.Outcome != v1alpha1.ResolvedFailed {
		t.Errorf("resolution = %+v, want namespace shop, action order-1, outcome Failed", named)
	}
}

func TestBuildQueueEmptyIsAList(t *testing.T) {
	var out bytes.Buffer
	if err := printStructured(&out, outputJSON, ledgerclient.BuildQueue(nil, now)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(out.String()), ""); got != `{"items":[]}` {
		t.Errorf("empty queue = %s, want an empty items list", out.String())
	}
}

func TestWriteStatus(t *testing.T) {
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1", CreationTimestamp: at(-5 * time.Minute)},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status: v1alpha1.ToolActionStatus{
			Phase:          v1alpha1.PhaseSucceeded,
			Attempts:       1,
			IdempotencyKey: "shop/order-1",
			RequestDigest:  "sha256:abc",
			ExternalRef:    "ch_1",
			// The lookup that found it was a replay of the stored response.
			ReplayedByDownstream: true,
			Claim:                &v1alpha1.ExecutorClaim{Executor: "executor-a", Attempt: 1, LeaseExpiry: at(-3 * time.Minute)},
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: "FoundByLookup", Message: "the downstream\napplied the request"},
			},
			History: []v1alpha1.Transition{
				{Time: at(-4 * time.Minute), To: v1alpha1.PhaseExecuting, Reason: "Executing", Attempt: 1, Executor: "executor-a", Message: "attempt 1 claimed"},
				{Time: at(-4 * time.Minute), From: v1alpha1.PhaseExecuting, To: v1alpha1.PhaseUnknown, Reason: "OutcomeUnknown", Attempt: 1, Executor: "executor-a"},
				{Time: at(-3 * time.Minute), From: v1alpha1.PhaseUnknown, To: v1alpha1.PhaseSucceeded, Reason: "FoundByLookup", Attempt: 1, Executor: "executor-a"},
			},
			DroppedTransitions: 2,
		},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, action, statusFacts{}, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"Phase:", "Succeeded",
		"Claim:", "executor executor-a, attempt 1, lease expiry 2026-11-30T11:57:00Z (3m ago)",
		"External ref:", "ch_1 (the downstream replayed its stored response: it deduplicated)\n",
		"Error:", "<none>",
		"Compensated by:",
		"Succeeded   True     FoundByLookup   the downstream applied the request",
		"History (oldest first; 2 older transitions dropped):",
		"2026-11-30T11:56:00Z   (new) → Executing",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("status does not contain %q:\n%s", want, text)
		}
	}
	// Nothing the record does not hold is printed.
	for _, absent := range []string{"Approval", "Unknown since", "Next attempt", "Compensates:", "Tombstone"} {
		if strings.Contains(text, absent) {
			t.Errorf("status contains %q, which the record does not hold:\n%s", absent, text)
		}
	}
	executing := strings.Index(text, "(new) → Executing")
	unknown := strings.Index(text, "Executing → Unknown")
	succeeded := strings.Index(text, "Unknown → Succeeded")
	if executing < 0 || unknown < executing || succeeded < unknown {
		t.Errorf("timeline out of order:\n%s", text)
	}
}

// run executes the console without a cluster: every case below must fail
// before a request is made.
func run(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	// A server nobody listens on: a request would fail with another message.
	args = append(args, "--server", "https://127.0.0.1:1", "--kubeconfig", "/nonexistent")
	code = Run(context.Background(), streams, args)
	return code, out.String(), errOut.String()
}

func TestInvalidInvocationsExitOne(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "status without key", args: []string{"status"}, want: "status takes exactly one KEY"},
		{name: "status with two keys", args: []string{"status", "a", "b"}, want: "got 2 arguments"},
		{name: "status with a bad key", args: []string{"status", "Order_1"}, want: `"Order_1" cannot name a ToolAction`},
		{name: "unknown output", args: []string{"status", "order-1", "-o", "xml"}, want: `output format must be json or yaml, not "xml"`},
		{name: "unknown flag", args: []string{"queue", "--bogus"}, want: "unknown flag: --bogus; see 'kubectl toolledger queue --help'"},
		{name: "queue takes no key", args: []string{"queue", "order-1"}, want: "unknown command"},
		{name: "tombstones takes no key", args: []string{"tombstones", "order-1"}, want: `unknown command "order-1" for "kubectl toolledger tombstones"`},
		{name: "tombstones of a bad tool", args: []string{"tomb", "--tool", "Service/charge"}, want: "the kind must be Tool or ClusterTool"},
		{name: "unknown command", args: []string{"cancel", "order-1"}, want: `unknown command "cancel" for "kubectl toolledger"`},
		{name: "approve without reason", args: []string{"approve", "order-1"}, want: "--reason is required"},
		{name: "deny with a malformed digest", args: []string{"deny", "order-1", "--reason", "r", "--digest", "sha256:abc"}, want: `--digest "sha256:abc" is not a request digest`},
		{name: "resolve without reason", args: []string{"resolve", "order-1", "--attempt", "1", "--outcome", "Failed"}, want: "--reason is required"},
		{name: "resolve Succeeded without reference", args: []string{"resolve", "order-1", "--attempt", "1", "--outcome", "Succeeded", "--reason", "r"}, want: "--outcome Succeeded needs --external-ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(tt.args...)
			if code != ExitError {
				t.Errorf("exit code %d, want %d", code, ExitError)
			}
			if !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr = %q, want an error containing %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, []string{"--help"})
	stdout, stderr := out.String(), errOut.String()
	if code != ExitOK || stderr != "" {
		t.Fatalf("--help: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"kubectl toolledger [command]", "status", "queue", "tombstones", "resolve", "Tombstones", "--namespace", "--context", "--kubeconfig"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help does not mention %q:\n%s", want, stdout)
		}
	}
}

// fakeAPI serves one ToolAction and the ToolResolutions created for it, and
// answers every read of a resolution with the Applied condition given.
type fakeAPI struct {
	t       *testing.T
	action  v1alpha1.ToolAction
	applied *metav1.Condition
	created []v1alpha1.ToolResolution
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/apis/toolledger.dev/v1alpha1/namespaces/shop/"
	write := func(code int, obj any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if err := json.NewEncoder(w).Encode(obj); err != nil {
			f.t.Errorf("cannot encode the answer: %v", err)
		}
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == prefix+"toolactions/"+f.action.Name:
		write(http.StatusOK, f.action)
	case r.Method == http.MethodPost && r.URL.Path == prefix+"toolresolutions":
		var resolution v1alpha1.ToolResolution
		if err := json.NewDecoder(r.Body).Decode(&resolution); err != nil {
			f.t.Errorf("cannot decode the resolution: %v", err)
		}
		resolution.Name = resolution.GenerateName + "x7k2p"
		f.created = append(f.created, resolution)
		write(http.StatusCreated, resolution)
	case r.Method == http.MethodGet && len(f.created) == 1 && r.URL.Path == prefix+"toolresolutions/"+f.created[0].Name:
		resolution := f.created[0]
		resolution.Status.Conditions = []metav1.Condition{*f.applied}
		write(http.StatusOK, resolution)
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
	}
}

// runAgainst runs the console against a fake API server, with no kubeconfig.
func runAgainst(t *testing.T, api http.Handler, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	server := httptest.NewServer(api)
	t.Cleanup(server.Close)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "none"))
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code = Run(context.Background(), streams, append(args, "--server", server.URL, "-n", "shop"))
	return code, out.String(), errOut.String()
}

func TestResolveWaitReportsNotApplied(t *testing.T) {
	api := &fakeAPI{
		t: t,
		action: v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1"},
			Status:     v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseEscalated, Attempts: 1},
		},
		applied: &metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionFalse, Reason: "NotResolvable",
			Message: `ToolAction "order-1" is Succeeded; only Unknown or Escalated actions take a resolution`},
	}
	code, stdout, stderr := runAgainst(t, api, "resolve", "order-1", "--attempt", "1", "--outcome", "RetrySafe", "--reason", "no charge downstream", "--wait", "--timeout", "5s")
	if code != ExitError {
		t.Errorf("exit code %d, want %d", code, ExitError)
	}
	if len(api.created) != 1 || api.created[0].Spec.Outcome != v1alpha1.ResolvedRetrySafe || api.created[0].Spec.Reason != "no charge downstream" {
		t.Fatalf("created %+v, want one RetrySafe resolution with the reason", api.created)
	}
	for _, want := range []string{"toolresolution.toolledger.dev/order-1-resolution-x7k2p created", "Applied=False (NotResolvable)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout = %q, want it to contain %q", stdout, want)
		}
	}
	if want := `error: ToolResolution "order-1-resolution-x7k2p" was not applied: ToolAction "order-1" is Succeeded`; !strings.HasPrefix(stderr, want) {
		t.Errorf("stderr = %q, want it to start with %q", stderr, want)
	}
}

func TestResolveRefusesASettledAction(t *testing.T) {
	api := &fakeAPI{
		t: t,
		action: v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1"},
			Status:     v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, Attempts: 1},
		},
	}
	code, stdout, stderr := runAgainst(t, api, "resolve", "order-1", "--attempt", "1", "--outcome", "Failed", "--reason", "r")
	if code != ExitError || stdout != "" {
		t.Errorf("exit code %d, stdout %q; want 1 and nothing", code, stdout)
	}
	if want := `ToolAction "order-1" is Succeeded; only Unknown or Escalated actions take a resolution; nothing was created`; !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	if len(api.created) != 0 {
		t.Errorf("created %d resolutions, want none", len(api.created))
	}
}

func TestDecideOptionsValidate(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0", 64)
	tests := []struct {
		name string
		opts decideOptions
		want string // a substring of the error; empty means valid
	}{
		{name: "approve", opts: decideOptions{decision: v1alpha1.Approved, digest: digest, reason: "r"}},
		{name: "deny without a digest", opts: decideOptions{decision: v1alpha1.Denied, reason: "r"}},
		{name: "approve without a digest", opts: decideOptions{decision: v1alpha1.Approved, reason: "r"}, want: "--digest is required"},
		{name: "negative expiry", opts: decideOptions{decision: v1alpha1.Denied, reason: "r", expiresIn: -time.Second}, want: "--expires-in must not be negative"},
		{name: "name too long for the history", opts: decideOptions{decision: v1alpha1.Denied, reason: "r", name: strings.Repeat("a", 241)},
			want: "--name is 241 characters long; a ToolApproval's name has at most 240"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validate() = %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestWriteStatusEscapesDownstreamText: what a downstream chose reaches the
// terminal as text, never as escape sequences that act on it.
func TestWriteStatusEscapesDownstreamText(t *testing.T) {
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Name: "order-1", Namespace: "shop"},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status: v1alpha1.ToolActionStatus{
			Phase:       v1alpha1.PhaseFailed,
			ExternalRef: "ch_\x1b]0;owned\x07",
			Error:       &v1alpha1.ActionError{Class: v1alpha1.ErrorClassInvalidInput, Reason: "HTTP400", Message: "downstream answered 400: \x1b[2J\x1b[31mpaid\x1b[0m"},
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "InvalidInput",
				Message: "downstream answered 400: \x1b[2J", LastTransitionTime: at(0)}},
			History: []v1alpha1.Transition{{Time: at(0), To: v1alpha1.PhaseFailed, Reason: "HTTP400", Message: "evil\u202etxt"}},
		},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, action, statusFacts{}, now); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\x07\u202e") {
		t.Errorf("status holds control characters:\n%q", text)
	}
	for _, want := range []string{`ch_\x1b]0;owned\a`, `downstream answered 400: \x1b[2J\x1b[31mpaid\x1b[0m`, `evil\u202etxt`} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
}

func queued(namespace, name string, phase v1alpha1.Phase, created time.Duration, unknownSince *metav1.Time) v1alpha1.ToolAction {
	return v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, CreationTimestamp: at(created)},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status:     v1alpha1.ToolActionStatus{Phase: phase, UnknownSince: unknownSince, Attempts: 1},
	}
}

func TestWriteQueue(t *testing.T) {
	escalated := queued("shop", "escalated", v1alpha1.PhaseEscalated, -20*time.Minute, timePtr(-10*time.Minute))
	unknown := queued("shop", "old-but-recently-unknown", v1alpha1.PhaseUnknown, -time.Hour, timePtr(-time.Minute))
	waiting := queued("billing", "waiting", v1alpha1.PhaseAccepted, -5*time.Minute, nil)
	queue := ledgerclient.BuildQueue([]v1alpha1.ToolAction{waiting, unknown, escalated}, now)

	var table bytes.Buffer
	if err := writeQueue(&table, queue, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAMESPACE") || !strings.Contains(lines[1], "10m") {
		t.Errorf("table:\n%s\nwant a header with NAMESPACE and the escalated action first, 10m old", table.String())
	}
}

func TestWriteToolQueue(t *testing.T) {
	queue := ledgerclient.ToolQueue{Items: []ledgerclient.ToolQueueItem{
		{Namespace: "billing", Tool: "ClusterTool/notify", Escalated: 1},
		{Namespace: "shop", Tool: "ClusterTool/notify", Accepted: 1},
		{Namespace: "shop", Tool: "charge", Executing: 1, Accepted: 3, AwaitingApproval: 1, RetryScheduled: 1, Unknown: 1,
			Limits: &v1alpha1.DispatchLimits{MaxInFlight: 2, RequestsPerSecond: 10}},
	}}
	var table bytes.Buffer
	if err := writeToolQueue(&table, queue, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s\nwant a header and three rows", table.String())
	}
	if f := strings.Fields(lines[3]); strings.Join(f, " ") != "shop charge 1 3 1 1 1 0 2 10" {
		t.Errorf("charge row = %q, want its counts and its limits", lines[3])
	}
	if f := strings.Fields(lines[1]); f[len(f)-1] != "tool>" {
		t.Errorf("row of a tool that does not exist = %q, want <no tool> for its limits", lines[1])
	}
}
