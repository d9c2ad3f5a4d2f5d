// Package demo is the demo downstream: an in-memory payments service that
// honors the Idempotency-Key header (IETF httpapi draft) and can be told to
// fail in the ways that make exactly-once hard (lost answers, errors after
// commit, slow requests). Samples, the README walkthrough and tests run
// toolledger against it and count the effects. WithNaive turns the
// deduplication off, so that a request sent twice shows as two effects. It is
// not for production. It also keeps tickets (tickets.go), which take no
// idempotency key and are found by their business reference.
package demo

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolledger/toolledger/pkg/digest"
)

const (
	idempotencyKeyHeader = "Idempotency-Key"
	maxBodyBytes         = 64 << 10
)

// provenanceHeaders are the headers toolledger adds to say on whose behalf a
// call is made, and in which trace; the server keeps them so tests can
// check they arrived.
var provenanceHeaders = []string{
	"Toolledger-Run-Id",
	"Toolledger-Step-Id",
	"Toolledger-Parent-Task-Id",
	"Toolledger-Trace-Id",
	"Toolledger-Principals",
	"Toolledger-Requested-By",
	"Toolledger-Approved-By",
	"Traceparent",
}

// Charge is a committed payment.
type Charge struct {
	ID             string         `json:"id"`
	Amount         int64          `json:"amount"`
	Currency       string         `json:"currency"`
	Customer       string         `json:"customer,omitempty"`
	Status         string         `json:"status"`
	Created        time.Time      `json:"created"`
	IdempotencyKey string         `json:"idempotencyKey"`
	Metadata       map[string]any `json:"metadata,omitempty"`
}

// Server is an in-memory payments service that honors Idempotency-Key. It
// implements http.Handler. All state sits under one mutex: the service is
// tiny, and one lock makes the per-key decisions trivially atomic.
type Server struct {
	mux   *http.ServeMux
	naive bool

	mu            sync.Mutex
	chargeFaults  []Fault
	lookupFaults  []Fault
	byKey         map[string]*entry
	byID          map[string]Charge
	inFlight      map[string]int // naive mode: requests for a key not yet committed
	requests      map[string]int
	effects       map[string]int
	totalRequests int
	totalEffects  int
	lastAuth      string
	tickets       map[string][]Ticket // by correlation id
	ticketCount   int
	events        []Event
}

// entry is what the server remembers of a key, from the request that
// claimed it. charge is nil while that request is still being processed; in
// naive mode it is the key's first charge.
type entry struct {
	body       []byte // canonical JSON, to tell a replay from a reuse
	provenance http.Header
	charge     *Charge
}

// outcome is what a charge request amounts to, given the key's history.
type outcome int

const (
	outcomeNew outcome = iota
	outcomeReplay
	outcomeMismatch
	outcomeInProgress
)

// Option configures a Server.
type Option func(*Server)

// WithNaive makes the server a provider that does not deduplicate: every
// accepted POST /charges commits a new charge, whatever its Idempotency-Key,
// so Effects counts every request that applied. Lookup by key still answers
// the key's first charge, and 409 while a request for the key is in
// progress. The end-to-end suite runs against it, so that any request
// toolledger sends twice shows as a second effect.
func WithNaive() Option {
	return func(s *Server) { s.naive = true }
}

// NewServer returns an empty server with no faults queued.
func NewServer(opts ...Option) *Server {
	s := &Server{
		mux:      http.NewServeMux(),
		byKey:    map[string]*entry{},
		byID:     map[string]Charge{},
		inFlight: map[string]int{},
		requests: map[string]int{},
		effects:  map[string]int{},
		tickets:  map[string][]Ticket{},
	}
	for _, opt := range opts {
		opt(s)
	}
	s.mux.HandleFunc("POST /charges", s.createCharge)
	// {key...} takes the rest of the path, so a key with "/" works whether
	// the client escapes it as %2F or not.
	s.mux.HandleFunc("GET /charges/by-key/{key...}", s.chargeByKey)
	s.mux.HandleFunc("GET /charges/committed/{key...}", s.committedCharge)
	s.mux.HandleFunc("GET /charges/{id}", s.chargeByID)
	s.mux.HandleFunc("POST /tickets", s.createTicket)
	s.mux.HandleFunc("GET /tickets", s.searchTickets)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	s.mux.HandleFunc("POST /_admin/faults", s.adminInjectFault)
	s.mux.HandleFunc("DELETE /_admin/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	s.mux.HandleFunc("GET /_admin/stats", s.adminStats)
	// A notification sink: the manager's --notification-sink.
	s.mux.HandleFunc("POST /events", s.receiveEvent)
	s.mux.HandleFunc("GET /_admin/events", s.adminEvents)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	key, keyErr := parseIdempotencyKey(r.Header.Get(idempotencyKeyHeader))
	s.countRequest(key, r.Header.Get("Authorization"))
	if keyErr != nil {
		writeError(w, http.StatusBadRequest, keyErr.Error())
		return
	}
	body, charge, err := parseCharge(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Every keyed, valid request consumes a fault, replays included, so a
	// test can make "the next request" fail whatever it is.
	fault := s.nextFault(&s.chargeFaults)
	if fault.Mode == FaultUnavailable {
		if fault.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(fault.RetryAfter))
		}
		writeError(w, http.StatusServiceUnavailable, "service unavailable")
		return
	}
	if fault.Mode == FaultDropBeforeCommit {
		dropConnection(w)
		return
	}
	out, existing := s.claim(key, body, r.Header)
	if fault.Mode == FaultDelay {
		// The whole delay, even if the client gives up: a real service keeps
		// working on a request whose caller timed out.
		time.Sleep(fault.Delay)
	}
	if out == outcomeNew {
		// Committed even if the client went away: the service cannot know
		// the client gave up, which is the case toolledger must survive.
		existing = s.commit(key, charge)
	}
	switch fault.Mode {
	case FaultDropAfterCommit:
		dropConnection(w)
		return
	case FaultErrorAfterCommit:
		writeError(w, http.StatusInternalServerError, "internal server error")
		return
	}
	switch out {
	case outcomeNew:
		writeJSON(w, http.StatusCreated, existing)
	case outcomeReplay:
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, existing)
	case outcomeMismatch:
		writeError(w, http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request body")
	case outcomeInProgress:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "a request with this Idempotency-Key is in progress")
	}
}

// parseIdempotencyKey accepts the structured-field string the draft
// specifies ("shop/order-42") and, for curl users, a bare value.
func parseIdempotencyKey(value string) (string, error) {
	key := value
	if strings.HasPrefix(value, `"`) {
		var err error
		if key, err = strconv.Unquote(value); err != nil {
			return "", errors.New("Idempotency-Key header is not a well-formed quoted string")
		}
	}
	if key == "" {
		return "", errors.New("Idempotency-Key header is required")
	}
	return key, nil
}

// parseCharge validates the body and returns its canonical form and the
// charge it asks for. It decodes the canonical form, so it judges values,
// not spellings: 1e2 is the integer 100, as it is for the replay check.
func parseCharge(w http.ResponseWriter, r *http.Request) ([]byte, Charge, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return nil, Charge{}, fmt.Errorf("cannot read request body: %w", err)
	}
	canonical, err := digest.Canonicalize(raw)
	if err != nil {
		return nil, Charge{}, fmt.Errorf("request body is not valid JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, Charge{}, errors.New("request body must be a JSON object")
	}
	var c Charge
	n, ok := fields["amount"].(json.Number)
	if c.Amount, err = strconv.ParseInt(string(n), 10, 64); !ok || err != nil || c.Amount <= 0 {
		return nil, Charge{}, errors.New("amount is required and must be a positive integer (minor units)")
	}
	if c.Currency, ok = fields["currency"].(string); !ok || !isCurrencyCode(c.Currency) {
		return nil, Charge{}, errors.New("currency is required and must be 3 uppercase letters (ISO 4217)")
	}
	if customer, present := fields["customer"]; present {
		if c.Customer, ok = customer.(string); !ok {
			return nil, Charge{}, errors.New("customer must be a string")
		}
	}
	delete(fields, "amount")
	delete(fields, "currency")
	delete(fields, "customer")
	if len(fields) > 0 {
		c.Metadata = fields
	}
	return canonical, c, nil
}

func isCurrencyCode(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func (s *Server) countRequest(key, authorization string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.totalRequests++
	if key != "" {
		s.requests[key]++
	}
	s.lastAuth = authorization
}

// claim decides what a request for key amounts to and, for a new key,
// marks it in progress so that concurrent requests get 409 until commit. In
// naive mode every request is new, and in progress until it commits.
func (s *Server) claim(key string, body []byte, h http.Header) (outcome, Charge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	if s.naive {
		if !ok {
			s.byKey[key] = &entry{body: body, provenance: provenance(h)}
		}
		s.inFlight[key]++
		return outcomeNew, Charge{}
	}
	switch {
	case !ok:
		s.byKey[key] = &entry{body: body, provenance: provenance(h)}
		return outcomeNew, Charge{}
	case e.charge == nil:
		return outcomeInProgress, Charge{}
	case !bytes.Equal(e.body, body):
		return outcomeMismatch, Charge{}
	default:
		return outcomeReplay, *e.charge
	}
}

func (s *Server) commit(key string, c Charge) Charge {
	c.ID = newChargeID()
	c.Status = "succeeded"
	c.Created = time.Now().UTC()
	c.IdempotencyKey = key
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.byKey[key]; e.charge == nil {
		e.charge = &c
	}
	if s.naive {
		if s.inFlight[key]--; s.inFlight[key] == 0 {
			delete(s.inFlight, key)
		}
	}
	s.byID[c.ID] = c
	s.effects[key]++
	s.totalEffects++
	return c
}

func provenance(h http.Header) http.Header {
	p := http.Header{}
	for _, name := range provenanceHeaders {
		if values := h.Values(name); len(values) > 0 {
			p[name] = values
		}
	}
	return p
}

func newChargeID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails since Go 1.24; it crashes the program instead
	return "ch_" + hex.EncodeToString(b[:])
}

// dropConnection closes the connection without a response, so the client
// sees EOF or a reset. http.ErrAbortHandler is the fallback where hijacking
// is impossible (HTTP/2); it resets the stream.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func (s *Server) chargeByKey(w http.ResponseWriter, r *http.Request) {
	if s.nextFault(&s.lookupFaults).Mode == FaultLookupUnavailable {
		writeError(w, http.StatusServiceUnavailable, "service unavailable")
		return
	}
	key := r.PathValue("key")
	if s.inProgress(key) {
		// Not "absent": the request may still commit, so a caller must not re-send yet.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "a request with this Idempotency-Key is in progress")
		return
	}
	c, ok := s.Charge(key)
	if !ok {
		writeError(w, http.StatusNotFound, "no charge with this Idempotency-Key")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// committedCharge is a lookup that reads committed charges only, as many
// providers' do (the record appears at commit): 404 while a request for the
// key is still in progress, which a later commit contradicts.
func (s *Server) committedCharge(w http.ResponseWriter, r *http.Request) {
	c, ok := s.Charge(r.PathValue("key"))
	if !ok {
		writeError(w, http.StatusNotFound, "no charge with this Idempotency-Key")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// inProgress reports whether a request for the key is being processed.
func (s *Server) inProgress(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.naive {
		return s.inFlight[key] > 0
	}
	e, ok := s.byKey[key]
	return ok && e.charge == nil
}

func (s *Server) chargeByID(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	c, ok := s.byID[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "no charge with this id")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) adminInjectFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid fault: %v", err))
		return
	}
	if err := f.validate(); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid fault: %v", err))
		return
	}
	s.InjectFault(f)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	stats := struct {
		Requests      map[string]int `json:"requests"`
		Effects       map[string]int `json:"effects"`
		TotalRequests int            `json:"totalRequests"`
		TotalEffects  int            `json:"totalEffects"`
		InProgress    []string       `json:"inProgress,omitempty"`
	}{maps.Clone(s.requests), maps.Clone(s.effects), s.totalRequests, s.totalEffects, s.keysInProgress()}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, stats)
}

// keysInProgress are the keys with a request being processed; s.mu is held.
func (s *Server) keysInProgress() []string {
	var keys []string
	for key, e := range s.byKey {
		if s.naive && s.inFlight[key] > 0 || !s.naive && e.charge == nil {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// Requests is the number of POST /charges requests that carried key, whatever
// came of them.
func (s *Server) Requests(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[key]
}

// Effects is the number of charges committed for key. The server never
// commits twice for a key unless it is naive (WithNaive); the counter is
// there so tests assert it.
func (s *Server) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

// TotalRequests counts every POST /charges request, including those
// refused for a missing or malformed key.
func (s *Server) TotalRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalRequests
}

// TotalEffects counts every committed charge.
func (s *Server) TotalEffects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalEffects
}

// Charge returns the charge committed for key; in naive mode, the first.
func (s *Server) Charge(key string) (Charge, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byKey[key]
	if !ok || e.charge == nil {
		return Charge{}, false
	}
	c := *e.charge
	c.Metadata = maps.Clone(c.Metadata)
	return c, true
}

// ProvenanceHeaders returns the provenance headers of the request that
// claimed key, the one that committed (or is committing) its charge; nil if
// no request claimed it.
func (s *Server) ProvenanceHeaders(key string) http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		return e.provenance.Clone()
	}
	return nil
}

// LastAuthorization returns the Authorization header of the latest
// POST /charges request.
func (s *Server) LastAuthorization() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastAuth
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status is sent; an encoding or write error can only mean the
	// client is gone, and there is no one left to tell.
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]string{"error": message})
}
