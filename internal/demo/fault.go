package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// FaultMode names a failure the server can be told to simulate.
type FaultMode string

const (
	// FaultUnavailable answers 503 (with Retry-After if RetryAfter > 0) without committing.
	FaultUnavailable FaultMode = "unavailable"
	// FaultDropAfterCommit commits the charge, then closes the connection
	// without any response: the client cannot tell whether it happened.
	FaultDropAfterCommit FaultMode = "drop-after-commit"
	// FaultDropBeforeCommit reads the request, then closes the connection
	// without committing or answering: the client cannot tell either, but a
	// lookup shows nothing happened.
	FaultDropBeforeCommit FaultMode = "drop-before-commit"
	// FaultErrorAfterCommit commits the charge, then answers 500.
	FaultErrorAfterCommit FaultMode = "error-after-commit"
	// FaultDelay holds the request for Delay before committing, even if the
	// client goes away meanwhile, as a real service would. The key stays in
	// progress until then.
	FaultDelay FaultMode = "delay"
	// FaultLookupUnavailable makes the lookup endpoint answer 503.
	FaultLookupUnavailable FaultMode = "lookup-unavailable"
)

// Fault is a queued failure. Charge requests consume charge faults and
// lookups consume lookup faults, one count per request, in injection order.
type Fault struct {
	Mode FaultMode `json:"mode"`
	// Count is how many requests the fault applies to; 0 means 1.
	Count int `json:"count,omitempty"`
	// Delay is how long FaultDelay holds a request; JSON spells it as a Go
	// duration string such as "2s".
	Delay time.Duration `json:"delay,omitempty"`
	// RetryAfter is the Retry-After value, in seconds, of FaultUnavailable.
	RetryAfter int `json:"retryAfterSeconds,omitempty"`
}

// faultJSON is Fault's wire form, with the delay as a readable duration.
type faultJSON struct {
	Mode       FaultMode `json:"mode"`
	Count      int       `json:"count,omitempty"`
	Delay      string    `json:"delay,omitempty"`
	RetryAfter int       `json:"retryAfterSeconds,omitempty"`
}

// MarshalJSON spells Delay as a duration string.
func (f Fault) MarshalJSON() ([]byte, error) {
	j := faultJSON{Mode: f.Mode, Count: f.Count, RetryAfter: f.RetryAfter}
	if f.Delay != 0 {
		j.Delay = f.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Delay as a duration string. Unknown members are
// refused so that a misspelled option does not silently do nothing.
func (f *Fault) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j faultJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*f = Fault{Mode: j.Mode, Count: j.Count, RetryAfter: j.RetryAfter}
	if j.Delay != "" {
		d, err := time.ParseDuration(j.Delay)
		if err != nil {
			return fmt.Errorf("invalid delay: %w", err)
		}
		f.Delay = d
	}
	return nil
}

func (f Fault) validate() error {
	switch f.Mode {
	case FaultUnavailable, FaultDropAfterCommit, FaultDropBeforeCommit, FaultErrorAfterCommit, FaultLookupUnavailable:
	case FaultDelay:
		if f.Delay <= 0 {
			return errors.New("a delay fault needs a positive delay")
		}
	default:
		return fmt.Errorf("unknown fault mode %q", f.Mode)
	}
	if f.Count < 0 || f.RetryAfter < 0 {
		return errors.New("count and retryAfterSeconds must not be negative")
	}
	return nil
}

// InjectFault queues f behind the faults already queued. It panics on an
// invalid fault, which is a bug in the calling test; the admin endpoint
// validates first and answers 400 instead.
func (s *Server) InjectFault(f Fault) {
	if err := f.validate(); err != nil {
		panic("demo: " + err.Error())
	}
	if f.Count == 0 {
		f.Count = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Mode == FaultLookupUnavailable {
		s.lookupFaults = append(s.lookupFaults, f)
	} else {
		s.chargeFaults = append(s.chargeFaults, f)
	}
}

// ClearFaults drops every queued fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chargeFaults, s.lookupFaults = nil, nil
}

// nextFault consumes one count of the head of queue (s.chargeFaults or
// s.lookupFaults); the zero Fault means none is queued.
func (s *Server) nextFault(queue *[]Fault) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := *queue
	if len(q) == 0 {
		return Fault{}
	}
	f := q[0]
	if q[0].Count--; q[0].Count == 0 {
		*queue = q[1:]
	}
	return f
}
