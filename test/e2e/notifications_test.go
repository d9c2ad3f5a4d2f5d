//go:build e2e && linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/testenv"
)

// notifyKill: the only manager delivers CloudEvents to a sink, which holds
// every delivery unanswered; each trial's agents invoke 5–10 intents, and
// the manager is SIGKILLed as soon as some of them settled (their events
// recorded with the transitions, none acknowledged). The sink then answers
// again and a replacement starts: every event the trial's actions owe
// arrives, and no other.
func notifyKill(s *suite, sc *run) error {
	if err := s.stopSteadyManagers(); err != nil {
		return err
	}
	receiver, err := testenv.StartCloudEventsReceiver()
	if err != nil {
		return err
	}
	defer func() { _ = receiver.Close() }()
	sink := "--notification-sink=audit=" + receiver.URL
	d, err := s.procs.startDownstream(sc.name, true)
	if err != nil {
		return err
	}
	defer d.proc.stop(5 * time.Second)
	start := func() (*manager, error) {
		m, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID("notify"), sink)
		if err != nil {
			return nil, err
		}
		return m, m.waitReady(s.ctx)
	}
	m, err := start()
	if err != nil {
		return err
	}
	defer func() { m.proc.stop(10 * time.Second) }()

	var caught, delivery tally
	var errs []error
	for i := range max(s.trials/4, 1) {
		if s.ctx.Err() != nil {
			break
		}
		rng := s.rngFor(sc.name, i)
		tr, err := s.newTrial(sc, d, toolOptions{class: v1alpha1.Compensatable, lookup: true})
		if err != nil {
			return err
		}
		keys := intents(tr, rng, "order", intRange(rng, 5, 10))
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
		receiver.Hold()
		requestsBefore := receiver.Requests()
		var agents sync.WaitGroup
		s.invokeAll(ctx, tr, keys, &agents)
		settled := s.waitActions(ctx, tr, intRange(rng, 1, len(keys)), nil)
		m.proc.kill()
		receiver.Drop()
		acknowledged := s.eventsOf(receiver, tr)
		for id := range acknowledged {
			tr.violation("", "event %s was acknowledged although the sink held every delivery until the kill", id)
		}
		caught.add("trials", 1)
		caught.add("actions settled, their events owed", len(settled))
		caught.add("deliveries held unanswered", receiver.Requests()-requestsBefore)
		if m, err = start(); err != nil {
			cancel()
			return err
		}
		agents.Wait()
		errs = append(errs, s.waitDelivered(ctx, tr, receiver, &delivery))
		cancel()
	}
	errs = append(errs, s.verify(sc))
	sc.row.Notes = append(sc.row.Notes,
		fmt.Sprintf("%d SIGKILLs of the only manager while a sink held every delivery, each replaced at once; the held deliveries dropped unacknowledged, the sink then answered again", len(sc.trials)),
		"at the kills: "+caught.String(), "after: "+delivery.String(), s.paths(sc))
	return errors.Join(errs...)
}

// eventsOf counts the acknowledged deliveries of the trial's events, by id.
func (s *suite) eventsOf(receiver *testenv.CloudEventsReceiver, tr *trial) map[string]int {
	ids := map[string]int{}
	for _, rec := range receiver.Received() {
		if rec.Event.Source() == notify.Source(tr.ns) {
			ids[rec.Event.ID()]++
		}
	}
	return ids
}

// waitDelivered waits until every event the trial's actions owe was
// acknowledged and recorded as delivered; one missing at the deadline, or
// one acknowledged that no action owes, is a violation.
func (s *suite) waitDelivered(ctx context.Context, tr *trial, receiver *testenv.CloudEventsReceiver, counts *tally) error {
	deadline := time.Now().Add(settleTimeout)
	for {
		records, err := s.records(ctx, tr)
		if err != nil {
			return err
		}
		got := s.eventsOf(receiver, tr)
		owed, missing := map[string]string{}, map[string]string{}
		for _, a := range records {
			for _, n := range a.Status.Notifications {
				owed[n.ID] = a.Name
				if got[n.ID] == 0 || len(n.Pending) > 0 {
					missing[n.ID] = a.Name
				}
			}
			if a.Status.Phase.IsTerminal() && len(a.Status.Notifications) == 0 {
				missing["(none recorded)"] = a.Name
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || testenv.Sleep(ctx, 200*time.Millisecond) != nil {
			for id, name := range missing {
				tr.violation(name, "event %s was not delivered (or not recorded as delivered) by %s", id, deadline.Format(time.TimeOnly))
			}
			repeated := 0
			for id, n := range got {
				if owed[id] == "" {
					tr.violation("", "event %s was delivered but no action owes it", id)
				}
				repeated += n - 1
			}
			counts.add("events delivered", len(got))
			counts.add("deliveries repeated", repeated)
			return nil
		}
	}
}
