package testenv

import (
	"errors"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
)

// Suite is what an envtest suite shares: a control plane, the demo
// downstream and, when asked for, a manager.
type Suite struct {
	*ControlPlane
	// Downstream counts the requests and effects, per idempotency key, of
	// the demo downstream at DownstreamURL.
	Downstream    *demo.Server
	DownstreamURL string

	// stops stop what StartSuite started, in start order.
	stops []func() error
}

// SuiteOptions say what StartSuite starts.
type SuiteOptions struct {
	ControlPlane ControlPlaneOptions
	// Manager, when set, runs a manager with these options until Stop.
	Manager *app.Options
}

// StartSuite starts a control plane, a demo downstream and, when opts ask
// for one, a manager. Stop stops them all, as a cleanup of a Ginkgo
// BeforeSuite (DeferCleanup(suite.Stop)) fails the suite when any of them
// does not stop cleanly. When StartSuite fails, what it started is stopped.
func StartSuite(opts SuiteOptions) (*Suite, error) {
	plane, err := StartControlPlane(opts.ControlPlane)
	if err != nil {
		return nil, err
	}
	s := &Suite{ControlPlane: plane, stops: []func() error{plane.Stop}}
	downstream, server := StartDownstream()
	s.Downstream, s.DownstreamURL = downstream, server.URL
	s.stops = append(s.stops, func() error {
		server.Close()
		return nil
	})
	if opts.Manager != nil {
		stopManager, err := StartManager(plane.Config, *opts.Manager)
		if err != nil {
			return nil, errors.Join(err, s.Stop())
		}
		s.stops = append(s.stops, stopManager)
	}
	return s, nil
}

// Stop stops what StartSuite started, the last started first, so that the
// manager and the downstream are gone before the control plane stops.
func (s *Suite) Stop() error {
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		errs = append(errs, s.stops[i]())
	}
	return errors.Join(errs...)
}
