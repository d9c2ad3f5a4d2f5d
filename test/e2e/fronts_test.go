//go:build e2e

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolledger/toolledger/internal/identity"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The fronts through which the fronts scenario's intents arrive, each with
// the caller's own key in its own carrier.
const (
	frontHTTP = "http" // POST with Idempotency-Key
	frontMCP  = "mcp"  // MCP tools/call with ACP's arguments.meta.idempotency_key
	frontA2A  = "a2a"  // A2A SendMessage, the messageId the key, by the A2A JavaScript SDK
)

// gatewayServing matches the gateway's line saying where it serves.
var gatewayServing = regexp.MustCompile(`"msg":"Serving Streamable HTTP","url":"(http://[^"]+)/mcp"`)

// tsClientDir holds the A2A JavaScript SDK's client, pinned by its lockfile.
var tsClientDir = filepath.Join("..", "..", "internal", "mcpgateway", "testdata", "tsclient")

// frontKill returns the scenario that sends every intent of a trial twice
// at once through one of the gateway's fronts (a gateway process per
// tenant, local-only), with keys minted by the callers, SIGKILLs the only
// manager at an aimed-at point of the dispatch and starts another; each
// caller sends its intent again until the ledger's answer is final.
func frontKill(front string) func(s *suite, sc *run) error {
	return func(s *suite, sc *run) error { return frontsKill(s, sc, front) }
}

func frontsKill(s *suite, sc *run, front string) error {
	node, err := nodeClient(s.ctx)
	if err != nil {
		return err
	}
	gateways, err := s.newGateways()
	if err != nil {
		return err
	}
	defer gateways.stop()
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	var pool []*manager
	defer stopAll(&pool)
	trials := min(s.trials, 10)
	ctx, cancel := context.WithTimeout(s.ctx, time.Duration(trials)*8*time.Second+3*time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		intents int
		mu      sync.Mutex
		answers tally
		resent  int
	)
	k, err := s.crashTrials(sc, d, &pool, 1, trials, allStages, "fronts", func(tr *trial, rng *rand.Rand) (int, func(), error) {
		base, err := gateways.start(s, tr.ns, false)
		if err != nil {
			return 0, nil, err
		}
		n := intRange(rng, 5, 7)
		intents += n
		type intent struct {
			clientKey, name string
			amount          int64
		}
		sends := make([]intent, n)
		for j := range sends {
			clientKey := fmt.Sprintf("%s_%s-%02d-%08x", strings.ToUpper(front), tr.ns, j, rng.Uint32())
			name := tr.add(sdk.ClientKey(gateways.caller, "charge", clientKey), int64(intRange(rng, 100, 99999)))
			sends[j] = intent{clientKey, name, tr.amount(name)}
		}
		return n, func() {
			for _, in := range sends {
				for range 2 {
					wg.Go(func() {
						answer, sent, err := sendThrough(ctx, node, base, front, in.clientKey, in.name, in.amount)
						mu.Lock()
						answers.add(answer, 1)
						resent += sent - 1
						mu.Unlock()
						if err != nil {
							tr.violation(in.name, "%s: %v", front, err)
						}
					})
				}
			}
		}, nil
	})
	if err != nil {
		return err
	}
	wg.Wait()
	err = s.verify(sc)
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials, each a tenant with its own gateway process; %d intents, each sent by two callers at once", trials, intents),
		fmt.Sprintf("the callers sent again %d times after an answer in flight or a failed connection; their last answers: %s", resent, answers.String()),
		fmt.Sprintf("%d SIGKILLs, %d manager processes started in all; kill points reached: %s", k.kills, k.started, k.reached.String()),
		s.paths(sc))
	return err
}

// gateways are a scenario's gateway processes, one per trial, local-only,
// each acting as the suite's own user (the caller of every request).
type gateways struct {
	path   string
	caller string
	mu     sync.Mutex
	procs  []*process
}

// newGateways finds the gateway's binary and the user its requests act as.
func (s *suite) newGateways() (*gateways, error) {
	path, err := binary("toolledger-mcp")
	if err != nil {
		return nil, err
	}
	self, err := identity.Self(s.ctx, s.cluster.client)
	if err != nil {
		return nil, err
	}
	return &gateways{path: path, caller: self.Username}, nil
}

// start runs a gateway for ns and returns its base URL.
func (g *gateways) start(s *suite, ns string, clusterTools bool) (string, error) {
	base, p, err := s.startGateway(g.path, ns, clusterTools)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.procs = append(g.procs, p)
	return base, nil
}

// stop stops every gateway started.
func (g *gateways) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.procs {
		p.stop(5 * time.Second)
	}
}

// startGateway runs toolledger-mcp for ns, local-only on 127.0.0.1, and
// returns its base URL; with clusterTools it publishes the ClusterTools
// that admit ns too.
func (s *suite) startGateway(path, ns string, clusterTools bool) (string, *process, error) {
	served := make(chan string, 1)
	p, err := s.procs.start("gateway-"+ns, path, []string{
		"--kubeconfig=" + s.cluster.kubeconfig, "--namespace=" + ns, "--cluster-tools=" + strconv.FormatBool(clusterTools),
		"--http=127.0.0.1:0", "--local-only", "--wait=2s",
	}, func(line string) {
		if found := gatewayServing.FindStringSubmatch(line); found != nil {
			select {
			case served <- found[1]:
			default:
			}
		}
	})
	if err != nil {
		return "", nil, err
	}
	select {
	case base := <-served:
		return base, p, nil
	case <-p.done:
		return "", nil, fmt.Errorf("the gateway of %s exited: %w\n%s", ns, p.err, p.tail(3000))
	case <-time.After(30 * time.Second):
		return "", nil, fmt.Errorf("the gateway of %s did not serve within 30s:\n%s", ns, p.tail(3000))
	}
}

// sendThrough is one caller: it sends the intent through the front, and
// again while the answer is in flight or the connection failed, until the
// answer is final or ctx ends. It returns the last answer's name, how many
// times it sent, and what it saw go wrong: an answer naming another
// action, or another amount.
func sendThrough(ctx context.Context, node, base, front, clientKey, name string, amount int64) (string, int, error) {
	arguments := map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_e2e"}
	if front == frontA2A {
		return sendA2A(ctx, node, base, clientKey, name, arguments)
	}
	var session *mcp.ClientSession
	if front == frontMCP {
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e-acp-agent", Version: "v1"}, nil)
		var err error
		if session, err = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil); err != nil {
			return "connect failed", 0, fmt.Errorf("cannot connect to the gateway: %w", err)
		}
		defer func() { _ = session.Close() }()
	}
	for sends := 1; ; sends++ {
		var answer string
		var final bool
		var err error
		if front == frontHTTP {
			answer, final, err = postOnce(ctx, base, clientKey, name, arguments)
		} else {
			answer, final, err = callOnce(ctx, session, clientKey, name, arguments)
		}
		if final || err != nil {
			return answer, sends, err
		}
		if testenv.Sleep(ctx, 300*time.Millisecond) != nil {
			return answer, sends, nil
		}
	}
}

// postOnce is one POST to the HTTP front.
func postOnce(ctx context.Context, base, clientKey, name string, arguments map[string]any) (string, bool, error) {
	body, err := json.Marshal(arguments)
	if err != nil {
		return "", true, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tools/charge", bytes.NewReader(body))
	if err != nil {
		return "", true, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "connection failed", false, nil
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return "connection failed", false, nil
	}
	status := strconv.Itoa(resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable:
		return status, false, nil
	case resp.Header.Get("Toolledger-Key") != name:
		return status, true, fmt.Errorf("the answer names action %q", resp.Header.Get("Toolledger-Key"))
	case resp.StatusCode == http.StatusOK:
		var result struct {
			Amount int64 `json:"amount"`
		}
		if err := json.Unmarshal(answer, &result); err != nil || result.Amount != arguments["amount"] {
			return status, true, fmt.Errorf("the answer %s is not the charge of %v", answer, arguments["amount"])
		}
		return status + " " + resp.Header.Get("Toolledger-Phase"), true, nil
	default:
		return status + " " + resp.Header.Get("Toolledger-Phase"), true, nil
	}
}

// callOnce is one tools/call with ACP's key.
func callOnce(ctx context.Context, session *mcp.ClientSession, clientKey, name string, arguments map[string]any) (string, bool, error) {
	args := map[string]any{"meta": map[string]any{"api_version": "2026-04-17", "idempotency_key": clientKey}}
	for k, v := range arguments {
		args[k] = v
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: args})
	var wire *jsonrpc.Error
	switch {
	case errors.As(err, &wire) && (strings.Contains(string(wire.Data), `"idempotency_in_flight"`) || strings.Contains(string(wire.Data), `"service_unavailable"`)):
		return "in flight", false, nil
	case errors.As(err, &wire):
		return "error", true, fmt.Errorf("refused: %s", wire.Data)
	case err != nil:
		return "connection failed", false, nil //nolint:nilerr // a lost answer is asked for again
	}
	encoded, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return "", true, err
	}
	var out struct {
		Key   string `json:"key"`
		Phase string `json:"phase"`
	}
	if err := json.Unmarshal(encoded, &out); err != nil {
		return "", true, err
	}
	if out.Key != name {
		return out.Phase, true, fmt.Errorf("the result names action %q", out.Key)
	}
	return out.Phase, true, nil
}

// sendA2A runs the A2A JavaScript SDK's client, which sends the message
// until its task is final; every answer must be the same task.
func sendA2A(ctx context.Context, node, base, messageID, name string, arguments map[string]any) (string, int, error) {
	encoded, err := json.Marshal(arguments)
	if err != nil {
		return "", 0, err
	}
	cmd := exec.CommandContext(ctx, node, "a2a.mjs")
	cmd.Dir = tsClientDir
	cmd.Env = append(os.Environ(), "A2A_URL="+base, "A2A_TOKEN=unused", "MESSAGE_ID="+messageID, "SKILL=charge",
		"ARGUMENTS="+string(encoded), "SENDS=1", "UNTIL_SETTLED=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "client failed", 0, fmt.Errorf("the A2A client failed: %w\n%s", err, stderr.String())
	}
	var report struct {
		Sends []struct {
			ID    string `json:"id"`
			State int    `json:"state"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		} `json:"sends"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil || len(report.Sends) == 0 {
		return "client failed", 0, fmt.Errorf("the A2A client's report %q: %w", stdout.String(), cmp.Or(err, errors.New("it sent nothing")))
	}
	for _, send := range report.Sends {
		if send.Error == nil && send.ID != name {
			return "wrong task", len(report.Sends), fmt.Errorf("a send was answered with task %q", send.ID)
		}
	}
	last := report.Sends[len(report.Sends)-1]
	if last.Error != nil {
		return "error", len(report.Sends), nil
	}
	return a2aStates[last.State], len(report.Sends), nil
}

// a2aStates names the A2A JavaScript SDK's TaskState numbers.
var a2aStates = map[int]string{1: "SUBMITTED", 2: "WORKING", 3: "COMPLETED", 4: "FAILED", 5: "CANCELED", 6: "INPUT_REQUIRED", 7: "REJECTED", 8: "AUTH_REQUIRED"}

// nodeClient returns node's path, installing the JavaScript clients'
// packages with npm ci when they are missing.
func nodeClient(ctx context.Context) (string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node is needed for the A2A JavaScript SDK's client (make test installs it): %w", err)
	}
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@a2a-js", "sdk")); err == nil {
		return node, nil
	}
	install := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	install.Dir = tsClientDir
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %w\n%s", tsClientDir, err, out)
	}
	return node, nil
}
