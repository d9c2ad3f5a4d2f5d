package testenv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Received is one delivery a CloudEventsReceiver acknowledged.
type Received struct {
	Event cloudevents.Event
	// Binary says the event came in binary mode: its attributes as ce-
	// headers, its data as the body.
	Binary bool
	At     time.Time
}

// CloudEventsReceiver is a notification sink on 127.0.0.1 that keeps
// every event it acknowledges (202). It can go down (its port closed) and
// come back on the same port, hold requests unanswered, then drop them,
// and refuse chosen events while it acknowledges the others.
type CloudEventsReceiver struct {
	// URL is where it listens, http://127.0.0.1:PORT.
	URL string

	addr     string
	mu       sync.Mutex
	server   *http.Server
	received []Received
	requests int
	// byID counts the requests of each event id, acknowledged or not.
	byID   map[string]int
	held   chan struct{}
	refuse func(cloudevents.Event) int
}

// StartCloudEventsReceiver listens on a free loopback port.
func StartCloudEventsReceiver() (*CloudEventsReceiver, error) {
	r := &CloudEventsReceiver{byID: map[string]int{}}
	if err := r.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	r.URL = "http://" + r.addr
	return r, nil
}

func (r *CloudEventsReceiver) listen(addr string) error {
	var lc net.ListenConfig
	listener, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	r.mu.Lock()
	r.addr, r.server = listener.Addr().String(), server
	r.mu.Unlock()
	go func() { _ = server.Serve(listener) }()
	return nil
}

// Down closes the port: a sender's connections are refused.
func (r *CloudEventsReceiver) Down() error {
	r.mu.Lock()
	server := r.server
	r.mu.Unlock()
	return server.Close()
}

// Up listens again on the same port.
func (r *CloudEventsReceiver) Up() error {
	return r.listen(r.addr)
}

// Hold keeps every request from now on unanswered until Drop.
func (r *CloudEventsReceiver) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = make(chan struct{})
	}
}

// Drop ends the held requests without acknowledging them (503), as a sink
// that went away would, and answers those after again.
func (r *CloudEventsReceiver) Drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held != nil {
		close(r.held)
		r.held = nil
	}
}

// Refuse answers each event from now on with the status refuse returns
// for it, keeping it from Received; 0 acknowledges it.
func (r *CloudEventsReceiver) Refuse(refuse func(cloudevents.Event) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refuse = refuse
}

// Close stops it.
func (r *CloudEventsReceiver) Close() error {
	r.Drop()
	return r.Down()
}

// Received returns the events acknowledged so far, in order.
func (r *CloudEventsReceiver) Received() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.received...)
}

// Requests counts the requests that arrived, acknowledged or not.
func (r *CloudEventsReceiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// RequestsFor counts the requests that carried event id, acknowledged or
// not.
func (r *CloudEventsReceiver) RequestsFor(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// ByID counts the acknowledged deliveries of each event id.
func (r *CloudEventsReceiver) ByID() map[string]int {
	ids := map[string]int{}
	for _, rec := range r.Received() {
		ids[rec.Event.ID()]++
	}
	return ids
}

func (r *CloudEventsReceiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.requests++
	r.byID[req.Header.Get("Ce-Id")]++
	held, refuse := r.held, r.refuse
	r.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-req.Context().Done():
		}
		http.Error(w, "dropped unacknowledged", http.StatusServiceUnavailable)
		return
	}
	ev, err := cehttp.NewEventFromHTTPRequest(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := ev.Validate(); err != nil {
		http.Error(w, errors.Join(errors.New("invalid event"), err).Error(), http.StatusBadRequest)
		return
	}
	if refuse != nil {
		if status := refuse(*ev); status != 0 {
			http.Error(w, "refused", status)
			return
		}
	}
	r.mu.Lock()
	r.received = append(r.received, Received{Event: *ev, Binary: req.Header.Get("Ce-Id") != "", At: time.Now()})
	r.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}
