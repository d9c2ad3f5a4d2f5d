//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The answers a front gives a retry, as the scenarios below tally them.
const (
	answerOutcome   = "the outcome"
	answerConflict  = "a conflict"
	answerUnknown   = "no such tool (the catalog between kinds)"
	answerRetry     = "in flight or unreachable"
	answerWrongName = "another action named"
)

// frontSend is one send of an intent through a front, with the caller's
// own key: what the front answered, the action it named and, for an
// outcome, its external reference.
type frontSend struct {
	answer, name, externalRef string
}

// sendOnce sends the intent once, to the tool charge, through front: HTTP (Idempotency-Key),
// MCP with ACP's key (a session of the Go MCP SDK) or A2A (its JSON-RPC
// binding, the messageId the key).
func sendOnce(ctx context.Context, base, front, clientKey string, arguments map[string]any) (frontSend, error) {
	switch front {
	case frontHTTP:
		return postFront(ctx, base, clientKey, arguments)
	case frontMCP:
		return callACP(ctx, base, clientKey, arguments)
	}
	return sendMessage(ctx, base, clientKey, arguments)
}

func postFront(ctx context.Context, base, clientKey string, arguments map[string]any) (frontSend, error) {
	body, err := json.Marshal(arguments)
	if err != nil {
		return frontSend{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tools/charge", bytes.NewReader(body))
	if err != nil {
		return frontSend{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return frontSend{answer: answerRetry}, nil //nolint:nilerr // a lost answer is asked for again
	}
	defer func() { _ = resp.Body.Close() }()
	answer, _ := io.ReadAll(resp.Body)
	sent := frontSend{name: resp.Header.Get("Toolledger-Key"), externalRef: resp.Header.Get("Toolledger-External-Ref")}
	switch {
	case resp.StatusCode == http.StatusOK:
		sent.answer = answerOutcome
	case resp.StatusCode == http.StatusUnprocessableEntity && strings.Contains(string(answer), `"idempotency_conflict"`):
		sent.answer = answerConflict
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(answer), `"unknown_tool"`):
		sent.answer = answerUnknown
	case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusServiceUnavailable:
		sent.answer = answerRetry
	default:
		return sent, fmt.Errorf("the front answered %d: %s", resp.StatusCode, answer)
	}
	return sent, nil
}

func callACP(ctx context.Context, base, clientKey string, arguments map[string]any) (frontSend, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-acp-agent", Version: "v1"}, nil)
	session, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		return frontSend{answer: answerRetry}, nil //nolint:nilerr // the gateway is asked again
	}
	defer func() { _ = session.Close() }()
	args := map[string]any{"meta": map[string]any{"api_version": "2026-04-17", "idempotency_key": clientKey}}
	for k, v := range arguments {
		args[k] = v
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: args})
	var wire *jsonrpc.Error
	switch {
	case errors.As(err, &wire) && strings.Contains(string(wire.Data), `"idempotency_conflict"`):
		return frontSend{answer: answerConflict}, nil
	case errors.As(err, &wire) && (strings.Contains(string(wire.Data), `"idempotency_in_flight"`) || strings.Contains(string(wire.Data), `"service_unavailable"`)):
		return frontSend{answer: answerRetry}, nil
	case err != nil && strings.Contains(err.Error(), "unknown tool"):
		return frontSend{answer: answerUnknown}, nil
	case errors.As(err, &wire):
		return frontSend{}, fmt.Errorf("refused: %s", wire.Data)
	case err != nil:
		return frontSend{answer: answerRetry}, nil //nolint:nilerr // a lost answer is asked for again
	}
	encoded, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return frontSend{}, err
	}
	var out struct {
		Key                     string `json:"key"`
		Phase                   string `json:"phase"`
		UntrustedDownstreamData struct {
			ExternalRef string `json:"externalRef"`
		} `json:"untrustedDownstreamData"`
	}
	if err := json.Unmarshal(encoded, &out); err != nil {
		return frontSend{}, err
	}
	if out.Phase != string(v1alpha1.PhaseSucceeded) {
		return frontSend{answer: answerRetry, name: out.Key}, nil
	}
	return frontSend{answer: answerOutcome, name: out.Key, externalRef: out.UntrustedDownstreamData.ExternalRef}, nil
}

func sendMessage(ctx context.Context, base, messageID string, arguments map[string]any) (frontSend, error) {
	data, err := json.Marshal(map[string]any{"skill": "charge", "arguments": arguments})
	if err != nil {
		return frontSend{}, err
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":%q,"role":"ROLE_USER","parts":[{"data":%s}]}}}`, messageID, data)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/a2a", strings.NewReader(body))
	if err != nil {
		return frontSend{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return frontSend{answer: answerRetry}, nil //nolint:nilerr // a lost answer is asked for again
	}
	defer func() { _ = resp.Body.Close() }()
	var answer struct {
		Result *struct {
			Task struct {
				ID     string `json:"id"`
				Status struct {
					State string `json:"state"`
				} `json:"status"`
				Metadata map[string]any `json:"metadata"`
			} `json:"task"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &answer); err != nil {
		return frontSend{}, fmt.Errorf("the A2A answer %q cannot be read: %w", raw, err)
	}
	switch {
	case answer.Error != nil && strings.Contains(answer.Error.Message, "has already been sent with a different request"):
		return frontSend{answer: answerConflict}, nil
	case answer.Error != nil && strings.Contains(answer.Error.Message, "no skill"):
		return frontSend{answer: answerUnknown}, nil
	case answer.Error != nil && answer.Error.Code == -32603:
		return frontSend{answer: answerRetry}, nil
	case answer.Error != nil:
		return frontSend{}, fmt.Errorf("A2A error %d: %s", answer.Error.Code, answer.Error.Message)
	case answer.Result == nil:
		return frontSend{answer: answerRetry}, nil
	}
	task := answer.Result.Task
	if task.Status.State != "TASK_STATE_COMPLETED" {
		return frontSend{answer: answerRetry, name: task.ID}, nil
	}
	ref, _ := task.Metadata["toolledger.dev/externalRef"].(string)
	return frontSend{answer: answerOutcome, name: task.ID, externalRef: ref}, nil
}

// sendUntilFinal sends until the answer is final (an outcome, a conflict,
// no such tool) or ctx ends, tallying every answer; an answer naming an
// action other than name is the driver's violation.
func sendUntilFinal(ctx context.Context, tr *trial, answers *tally, mu *sync.Mutex, base, front, clientKey, name string, arguments map[string]any) frontSend {
	for {
		sent, err := sendOnce(ctx, base, front, clientKey, arguments)
		if err == nil && sent.name != "" && sent.name != name {
			err = fmt.Errorf("%s: the answer names action %q", answerWrongName, sent.name)
		}
		mu.Lock()
		answers.add(front+": "+sent.answer, 1)
		mu.Unlock()
		if err != nil {
			tr.violation(name, "%s: %v", front, err)
			return sent
		}
		if sent.answer != answerRetry || testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			return sent
		}
	}
}

// --- a retry while the tool's name flips between a Tool and a ClusterTool ---

// frontKindFlip: a ClusterTool charge admits every tenant of the scenario,
// and each tenant's own Tool charge shadows it while it exists. Each
// trial (a tenant with its own gateway, which serves ClusterTools) sends
// 3–6 intents, each through the HTTP front, MCP with ACP's key or A2A
// with its caller's key, and sends each again 2–4 times, while the
// trial's Tool is deleted and created again every 0.3–1s, so that the
// name the callers address is answered now by the Tool, now by the
// ClusterTool. Every key must stay one action (its name derives from the
// caller, the tool's name and the key), with one effect; a retry is
// answered with the outcome, or refused as a conflict when the kind it
// meets is not the one recorded, never executed again.
func frontKindFlip(s *suite, sc *run) error {
	if err := s.steadyManagers(); err != nil {
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
	opts := toolOptions{class: v1alpha1.Compensatable, lookup: true}
	shared := &v1alpha1.ClusterTool{
		ObjectMeta: metav1.ObjectMeta{Name: "charge"},
		Spec: v1alpha1.ClusterToolSpec{
			ToolSpec:          tenantTool("", d, opts).Spec,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e.toolledger.dev/scenario": sc.name}},
		},
	}
	if err := s.cluster.client.Create(s.ctx, shared); err != nil {
		return fmt.Errorf("cannot create the ClusterTool: %w", err)
	}
	defer func() { _ = s.cluster.client.Delete(context.Background(), shared) }()
	var (
		mu        sync.Mutex
		answers   tally
		flips     int
		intentsIn int
	)
	fronts := []string{frontHTTP, frontMCP, frontA2A}
	err = s.parallelTrialsOf(sc, min(s.trials, 10), 5, func(_ int, rng *rand.Rand) error {
		tr, err := s.newTrial(sc, d, opts)
		if err != nil {
			return err
		}
		base, err := gateways.start(s, tr.ns, true)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
		defer cancel()
		flipping, stopFlipping := context.WithCancel(ctx)
		flipped := make(chan int, 1)
		go func() { flipped <- s.flipTool(flipping, tr, d, opts, rng.Uint64()) }()
		var wg sync.WaitGroup
		n := intRange(rng, 3, 6)
		for j := range n {
			front := fronts[j%len(fronts)]
			clientKey := fmt.Sprintf("%s_%s-%02d-%08x", strings.ToUpper(front), tr.ns, j, rng.Uint32())
			name := tr.add(sdk.ClientKey(gateways.caller, "charge", clientKey), int64(intRange(rng, 100, 99999)))
			arguments := map[string]any{"amount": tr.amount(name), "currency": "EUR", "customer": "cus_e2e"}
			resends := intRange(rng, 2, 4)
			pace := rand.New(rand.NewPCG(rng.Uint64(), uint64(j)))
			wg.Go(func() {
				var first frontSend
				for sent := 0; sent <= resends; sent++ {
					got := sendUntilFinal(ctx, tr, &answers, &mu, base, front, clientKey, name, arguments)
					switch {
					case first.answer == "" && got.answer == answerOutcome:
						first = got
					case got.answer == answerOutcome && got.externalRef != "" && got.externalRef != first.externalRef:
						tr.violation(name, "%s: a retry was answered with external reference %q, the first with %q", front, got.externalRef, first.externalRef)
					}
					if testenv.Sleep(ctx, between(pace, 300*time.Millisecond, 900*time.Millisecond)) != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		stopFlipping()
		mu.Lock()
		flips += <-flipped
		intentsIn += n
		mu.Unlock()
		// The last flip may have left the trial's Tool away: a key whose
		// every send met no tool is not an intent of the ledger.
		return s.restoreTool(ctx, tr, d, opts)
	})
	actions, perKey := s.actionsPerKey(sc)
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials, each a tenant with its own gateway (ClusterTools served); %d intents, each sent 3–5 times through one of the three fronts; the tenant's Tool deleted or created again %d times in all while they were",
			len(sc.trials), intentsIn, flips),
		fmt.Sprintf("actions in the tenants: %d for %d intents (%s)", actions, intentsIn, perKey),
		"the fronts' answers: "+answers.String(), s.paths(sc))
	return errors.Join(err, verifyErr)
}

// flipTool deletes the trial's Tool and creates it again, every 0.3–1s,
// until ctx ends, and returns how many times it did either.
func (s *suite) flipTool(ctx context.Context, tr *trial, d *downstream, opts toolOptions, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 0))
	flips := 0
	for testenv.Sleep(ctx, between(rng, 300*time.Millisecond, time.Second)) == nil {
		tool := tenantTool(tr.ns, d, opts)
		if err := s.cluster.client.Delete(ctx, tool); err == nil {
			flips++
			continue
		} else if !apierrors.IsNotFound(err) {
			continue
		}
		if err := s.cluster.client.Create(ctx, tool); err == nil {
			flips++
		}
	}
	return flips
}

// restoreTool creates the trial's Tool again if the flips left it away.
func (s *suite) restoreTool(ctx context.Context, tr *trial, d *downstream, opts toolOptions) error {
	err := s.cluster.client.Create(ctx, tenantTool(tr.ns, d, opts))
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create the Tool of %s again: %w", tr.ns, err)
	}
	return nil
}

// actionsPerKey counts the actions in the scenario's tenants, and how many
// each client key has (spec.clientKey): one each.
func (s *suite) actionsPerKey(sc *run) (int, string) {
	var counts tally
	total := 0
	for _, tr := range sc.trials {
		var list v1alpha1.ToolActionList
		if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
			continue
		}
		perKey := map[string]int{}
		for _, a := range list.Items {
			perKey[a.Spec.ClientKey]++
		}
		for key, n := range perKey {
			total += n
			counts.add(fmt.Sprintf("client keys with %d actions", n), 1)
			if n != 1 {
				tr.violation(key, "client key %q has %d actions", key, n)
			}
		}
	}
	return total, counts.String()
}

// --- the original request after a conflicting one, on an archived key --------

// archiveConflictThenOriginal: two managers keep records in the archive
// (the Tools' recordRetention is 1s). Each trial (a tenant with its own
// gateway) sends one intent through each front with its caller's key, and
// applies one as a manifest; once each has succeeded and its record has
// left etcd for the archive, the same key is sent with another amount,
// which must be refused as a conflict and execute nothing, and then the
// original request again, which must be answered with the original
// outcome (the same external reference), as must the original manifest
// applied again right after the changed one. One request downstream per
// key in all.
func archiveConflictThenOriginal(s *suite, sc *run) error {
	pool, stop, err := s.archiveManagers(sc, "conflict", 2)
	if err != nil {
		return err
	}
	defer stop(&pool)
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
	var (
		mu      sync.Mutex
		answers tally
		counts  tally
	)
	err = s.parallelTrialsOf(sc, s.archiveTrials(), 4, func(_ int, rng *rand.Rand) error {
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true, recordRetention: archiveRetention})
		if err != nil {
			return err
		}
		base, err := gateways.start(s, tr.ns, false)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for _, front := range []string{frontHTTP, frontMCP, frontA2A} {
			clientKey := fmt.Sprintf("%s_%s-%08x", strings.ToUpper(front), tr.ns, rng.Uint32())
			name := tr.add(sdk.ClientKey(gateways.caller, "charge", clientKey), int64(intRange(rng, 100, 99999)))
			original := map[string]any{"amount": tr.amount(name), "currency": "EUR", "customer": "cus_e2e"}
			changed := map[string]any{"amount": tr.amount(name) + 1, "currency": "EUR", "customer": "cus_e2e"}
			wg.Go(func() {
				first := sendUntilFinal(ctx, tr, &answers, &mu, base, front, clientKey, name, original)
				if first.answer != answerOutcome || !s.archived(ctx, tr, name) {
					tr.violation(name, "%s: the original was answered %q, or its record did not leave etcd for the archive", front, first.answer)
					return
				}
				if conflict := sendUntilFinal(ctx, tr, &answers, &mu, base, front, clientKey, name, changed); conflict.answer != answerConflict {
					tr.violation(name, "%s: another amount under the archived key was answered %q, want a conflict", front, conflict.answer)
				}
				again := sendUntilFinal(ctx, tr, &answers, &mu, base, front, clientKey, name, original)
				ok := again.answer == answerOutcome && again.externalRef == first.externalRef && first.externalRef != ""
				if !ok {
					tr.violation(name, "%s: the original request after the conflicting one was answered %q with external reference %q; want the outcome, %q",
						front, again.answer, again.externalRef, first.externalRef)
				}
				mu.Lock()
				counts.add(front+": originals answered with their outcome after a conflicting request", boolToInt(ok))
				mu.Unlock()
			})
		}
		wg.Go(func() {
			refused, ok, err := s.manifestAfterConflict(ctx, tr, rng)
			if err != nil {
				tr.violation("manifest", "%v", err)
			}
			mu.Lock()
			counts.add("manifests: originals applied again after a changed one, answered from the archive", boolToInt(ok))
			counts.add("manifests: applies of the original refused while the changed one's record was in etcd", refused)
			mu.Unlock()
		})
		wg.Wait()
		return nil
	})
	verifyErr := s.verify(sc)
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d trials, each a tenant with its own gateway; per trial one intent through each front and one manifest", len(sc.trials)),
		counts.String(), "the fronts' answers: "+answers.String(), s.paths(sc))
	return errors.Join(err, verifyErr, s.noTombstones(sc))
}

// archived waits until the action name has left etcd and the archive holds
// its record.
func (s *suite) archived(ctx context.Context, tr *trial, name string) bool {
	for testenv.Sleep(ctx, 200*time.Millisecond) == nil {
		err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: name}, &v1alpha1.ToolAction{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		rows, err := tr.archive.records(ctx, tr.ns)
		if err != nil {
			continue
		}
		for _, r := range rows {
			if r.action.Name == name && r.guardsKey {
				return true
			}
		}
	}
	return false
}

// manifestAfterConflict applies an intent's manifest, waits until its
// record is archived, applies it with another amount, and then the
// original again at once, and again while the API server refuses it (the
// changed one's record is in etcd for a moment): it returns how many
// applies were refused, and whether the original was answered from the
// archive with its first outcome.
func (s *suite) manifestAfterConflict(ctx context.Context, tr *trial, rng *rand.Rand) (int, bool, error) {
	key := tr.add(fmt.Sprintf("manifest-%08x", rng.Uint32()), int64(intRange(rng, 100, 99999)))
	original, err := s.writeManifest(key, tr, testenv.ChargeManifest(tr.ns, key, tr.amount(key), "cus_e2e"))
	if err != nil {
		return 0, false, err
	}
	changed, err := s.writeManifest(key+"-changed", tr, testenv.ChargeManifest(tr.ns, key, tr.amount(key)+1, "cus_e2e"))
	if err != nil {
		return 0, false, err
	}
	if out, err := s.kubectl(ctx, "apply", "-f", original); err != nil {
		return 0, false, fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	first := s.settledAction(ctx, tr, key)
	if first.Status.Phase != v1alpha1.PhaseSucceeded || !s.archived(ctx, tr, key) {
		return 0, false, fmt.Errorf("the manifest's intent did not succeed and leave etcd for the archive: %s", describe(first))
	}
	if out, err := s.kubectl(ctx, "apply", "-f", changed); err != nil {
		return 0, false, fmt.Errorf("kubectl apply of the changed manifest: %w: %s", err, out)
	}
	refused := 0
	for {
		out, err := s.kubectl(ctx, "apply", "-f", original)
		if err == nil {
			break
		}
		if !strings.Contains(out, "spec is immutable") || refused == 20 || testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			return refused, false, fmt.Errorf("kubectl apply of the original after the changed one: %w: %s", err, out)
		}
		refused++
	}
	again := s.settledAction(ctx, tr, key)
	ok := again.Status.Phase == v1alpha1.PhaseSucceeded && again.Status.ExternalRef == first.Status.ExternalRef && again.Status.SettledBy() == v1alpha1.ReasonSettledByArchive
	if !ok {
		return refused, false, fmt.Errorf("the original manifest after the changed one: %s; want Succeeded from the archive with %q", describe(again), first.Status.ExternalRef)
	}
	return refused, true, nil
}

// settledAction waits until the action name is settled in etcd, and
// returns it as last read (unsettled when ctx ended first).
func (s *suite) settledAction(ctx context.Context, tr *trial, name string) *v1alpha1.ToolAction {
	var a v1alpha1.ToolAction
	for testenv.Sleep(ctx, 200*time.Millisecond) == nil {
		if err := s.cluster.client.Get(ctx, client.ObjectKey{Namespace: tr.ns, Name: name}, &a); err == nil && a.Status.Phase.IsSettled() {
			break
		}
	}
	return &a
}
