//go:build e2e && linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// Tickets found by their business reference: the demo's ticket system takes
// no idempotency key at all, so a re-send opens a second ticket. Answers are
// lost after the ticket opened (dropped, 500, slower than the tool's
// timeout); the tool's Reference lookup searches by the incident, and only a
// ticket of that incident is a match. Some requests are reset before
// anything opened: the search then lists nothing, which proves nothing
// (noMatchMeansAbsent is off), so those intents escalate rather than risk a
// second ticket.

// ticketDeadline is the ticket tool's unknownOutcomeDeadline.
const ticketDeadline = 8 * time.Second

func ticketsByReference(s *suite, sc *run) error {
	return s.downstreamScenario(sc, true, "tickets", func(d *downstream, injected *tally) error {
		return s.parallelTrials(sc, faultParallel, func(_ int, rng *rand.Rand) error {
			tr, err := s.newTicketTrial(sc, d)
			if err != nil {
				return err
			}
			n := intRange(rng, 5, 10)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = tr.add(fmt.Sprintf("incident-%02d", i), 0)
			}
			faults := []demo.Fault{
				{Mode: demo.FaultDropAfterCommit, Count: rng.IntN(n/2 + 1)},
				{Mode: demo.FaultErrorAfterCommit, Count: rng.IntN(2)},
				{Mode: demo.FaultDelay, Delay: between(rng, 1100*time.Millisecond, 2500*time.Millisecond)},
				{Mode: demo.FaultUnavailable, Count: rng.IntN(3)},
				{Mode: demo.FaultDropBeforeCommit, Count: rng.IntN(2)},
			}
			for _, f := range faults {
				if f.Mode == demo.FaultDelay || f.Count > 0 {
					injected.add(string(f.Mode), max(f.Count, 1))
					if err := d.inject(s.ctx, f); err != nil {
						return err
					}
				}
			}
			ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for _, key := range keys {
				wg.Go(func() {
					out, err := s.invoke(ctx, sdk.Request{Namespace: tr.ns, Key: key, Tool: "ticket", Parameters: map[string]any{
						"correlation_id": ticketRef(tr.ns + "/" + key), "title": "Disk full on " + key,
					}})
					switch {
					case err != nil:
						tr.violation(key, "the agent got no outcome: %v", err)
					case !out.Phase.IsSettled():
						tr.violation(key, "Invoke returned unsettled phase %q", out.Phase)
					}
				})
			}
			wg.Wait()
			return nil
		})
	})
}

// ticketRef is the incident reference of a key: derived from it, so that
// the checker can map tickets back to intents, but not the key itself, so
// that a lookup by key would find nothing.
func ticketRef(key string) string { return "INC-" + strings.Replace(key, "/", ":", 1) }

// keyOfTicketRef inverts ticketRef.
func keyOfTicketRef(ref string) (string, bool) {
	rest, ok := strings.CutPrefix(ref, "INC-")
	if !ok {
		return "", false
	}
	return strings.Replace(rest, ":", "/", 1), true
}

// newTicketTrial creates a tenant whose Tool "ticket" opens tickets on d
// and finds them by the incident.
func (s *suite) newTicketTrial(sc *run, d *downstream) (*trial, error) {
	tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable})
	if err != nil {
		return nil, err
	}
	tr.tickets = true
	items := "/data"
	tool := &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: tr.ns, Name: "ticket"},
		Spec: v1alpha1.ToolSpec{
			Operation: "tickets.create", Version: "v1", IdempotencyClass: v1alpha1.Compensatable,
			ParametersSchema: &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","required":["correlation_id","title"],` +
				`"properties":{"correlation_id":{"type":"string"},"title":{"type":"string"}}}`)},
			UnknownOutcomeDeadline: &metav1.Duration{Duration: ticketDeadline},
			Retry:                  v1alpha1.RetryPolicy{MaxAttempts: 8, InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond}, MaxBackoff: &metav1.Duration{Duration: time.Second}},
			HTTP: &v1alpha1.HTTPAdapter{
				URL: d.url + "/tickets", Timeout: &metav1.Duration{Duration: toolTimeout},
				Lookup: &v1alpha1.HTTPLookup{
					Strategy: v1alpha1.LookupByReference, URL: d.url + "/tickets?correlation_id={correlation_id}", ItemsPointer: &items,
					Match: []v1alpha1.HTTPLookupMatch{{Field: "/correlation_id", Parameter: "/correlation_id"}},
				},
				Response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			},
		},
	}
	if err := s.cluster.client.Create(s.ctx, tool); err != nil {
		return nil, fmt.Errorf("cannot create the ticket tool of %s: %w", tr.ns, err)
	}
	return tr, nil
}

// ticketEvidence is the downstream's side of a ticket trial, by key: how
// many tickets each incident has (and any under the trial's prefix that
// no intent explains), and the first ticket of each.
func (s *suite) ticketEvidence(d *downstream, tr *trial, st stats) (map[string]int, map[string]Charge, error) {
	effects := map[string]int{}
	for ref, n := range st.Effects {
		if key, ok := keyOfTicketRef(ref); ok {
			effects[key] = n
		}
	}
	first := map[string]Charge{}
	for _, key := range tr.keys {
		status, body, err := d.send(s.ctx, http.MethodGet, "/tickets?correlation_id="+url.QueryEscape(ticketRef(key)), nil, nil)
		if err != nil || status != http.StatusOK {
			return nil, nil, fmt.Errorf("cannot search the tickets of %s: %d %w", key, status, err)
		}
		var found struct{ Data []demo.Ticket }
		if err := json.Unmarshal(body, &found); err != nil {
			return nil, nil, err
		}
		if len(found.Data) > 0 {
			first[key] = Charge{ID: found.Data[0].ID}
		}
	}
	return effects, first, nil
}
