//go:build e2e && linux

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// heldPastBudget is a KeyProtected tool whose lookup reads committed charges
// only (404 is absence, as the sample payments Tool declares) against a
// deduplicating downstream that holds 1–2 first requests of each trial for
// 10–13s: longer than the whole retry budget (8 attempts of a 1s timeout,
// 0.2–1s apart), during which the lookup answers 404 and every re-send under
// the key 409 in progress; then the held request commits. With kill, a
// steady manager is SIGKILLed as soon as one of the trial's requests is
// held, and replaced. No action may end Failed: the held request applies.
func heldPastBudget(kill bool) func(s *suite, sc *run) error {
	return func(s *suite, sc *run) error {
		var (
			mu    sync.Mutex
			kills int
			held  int
		)
		err := s.downstreamScenario(sc, false, "charges", func(d *downstream, injected *tally) error {
			opts := toolOptions{class: v1alpha1.KeyProtected, committedLookup: true}
			return s.parallelTrials(sc, faultParallel, func(_ int, rng *rand.Rand) error {
				tr, err := s.newTrial(sc, d, opts)
				if err != nil {
					return err
				}
				keys := intents(tr, rng, "order", intRange(rng, 3, 6))
				faults := make([]demo.Fault, intRange(rng, 1, 2))
				for i := range faults {
					faults[i] = demo.Fault{Mode: demo.FaultDelay, Delay: between(rng, 10*time.Second, 13*time.Second)}
				}
				injected.add(string(demo.FaultDelay), len(faults))
				if err := d.inject(s.ctx, faults...); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
				defer cancel()
				var wg sync.WaitGroup
				s.invokeAll(ctx, tr, keys, &wg)
				if kill {
					caught, err := s.waitRequestHeld(ctx, d, tr)
					if err != nil {
						return err
					}
					if caught {
						if err := s.killSteady(rng); err != nil {
							return err
						}
						mu.Lock()
						kills++
						mu.Unlock()
					}
				}
				wg.Wait()
				return nil
			})
		})
		for _, tr := range sc.trials {
			ledger, lerr := s.ledger(s.ctx, tr)
			if lerr != nil {
				continue
			}
			for _, a := range ledger {
				if a.Unseen {
					held++
				}
			}
		}
		note := fmt.Sprintf("%d actions met an unseen outcome (a held request or a lapsed claim) and none was failed", held)
		if kill {
			note = fmt.Sprintf("%d SIGKILLs of a steady manager while one of its trial's requests was held; ", kills) + note
		}
		sc.row.Notes = append(sc.row.Notes, note)
		return err
	}
}

// waitRequestHeld waits (at most 5s) until the downstream holds a request of
// the trial, and reports whether it did.
func (s *suite) waitRequestHeld(ctx context.Context, d *downstream, tr *trial) (bool, error) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := d.stats(ctx)
		if err != nil {
			return false, err
		}
		for _, key := range st.InProgress {
			if strings.HasPrefix(key, tr.ns+"/") {
				return true, nil
			}
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return false, err
		}
	}
	return false, nil
}

// killSteady SIGKILLs one of the steady managers at random and starts its
// replacement.
func (s *suite) killSteady(rng *rand.Rand) error {
	s.mu.Lock()
	victim := s.steady[rng.IntN(len(s.steady))]
	s.mu.Unlock()
	victim.proc.kill()
	return s.steadyManagers()
}
