package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const chargeBody = `{"amount":4200,"currency":"EUR","customer":"cus_1","order":"42"}`

// testServer is a Server behind a real HTTP listener.
type testServer struct {
	*Server
	url    string
	client *http.Client
}

func newTestServer(t *testing.T, opts ...Option) *testServer {
	t.Helper()
	s := NewServer(opts...)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	// Without keep-alives: net/http silently resends a request that carries
	// Idempotency-Key when a reused connection breaks, which would hide a
	// dropped connection from the test.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	return &testServer{Server: s, url: ts.URL, client: client}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) errorMessage(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return e.Error
}

func (r response) charge(t *testing.T) Charge {
	t.Helper()
	var c Charge
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatalf("charge body %q is not JSON: %v", r.body, err)
	}
	return c
}

// do sends a request and fails the test on a transport error.
func (ts *testServer) do(t *testing.T, method, path, body string, header http.Header) response {
	t.Helper()
	resp, err := ts.send(context.Background(), method, path, body, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (ts *testServer) send(ctx context.Context, method, path, body string, header http.Header) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header = header
	resp, err := ts.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func keyHeader(key string) http.Header {
	return http.Header{"Idempotency-Key": {key}}
}

// charge posts body with key quoted, as toolledger sends it.
func (ts *testServer) charge(t *testing.T, key, body string) response {
	t.Helper()
	return ts.do(t, http.MethodPost, "/charges", body, keyHeader(`"`+key+`"`))
}

func wantStatus(t *testing.T, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status = %d, want %d (body %s)", r.status, want, r.body)
	}
}

func wantCounts(t *testing.T, s *Server, key string, requests, effects int) {
	t.Helper()
	if got := s.Requests(key); got != requests {
		t.Errorf("Requests(%q) = %d, want %d", key, got, requests)
	}
	if got := s.Effects(key); got != effects {
		t.Errorf("Effects(%q) = %d, want %d", key, got, effects)
	}
}

func TestCreateCharge(t *testing.T) {
	ts := newTestServer(t)
	r := ts.charge(t, "shop/order-1", chargeBody)
	wantStatus(t, r, http.StatusCreated)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	got := r.charge(t)
	if len(got.ID) != len("ch_")+24 || !strings.HasPrefix(got.ID, "ch_") {
		t.Errorf("id %q is not ch_ and 24 hex digits", got.ID)
	}
	want := Charge{
		ID: got.ID, Amount: 4200, Currency: "EUR", Customer: "cus_1", Status: "succeeded",
		Created: got.Created, IdempotencyKey: "shop/order-1", Metadata: map[string]any{"order": "42"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("charge (-want +got):\n%s", diff)
	}
	if time.Since(got.Created) > time.Minute {
		t.Errorf("created = %v, want about now", got.Created)
	}
	stored, ok := ts.Charge("shop/order-1")
	if !ok {
		t.Fatal("Charge: not found")
	}
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("stored charge (-answered +stored):\n%s", diff)
	}
	wantCounts(t, ts.Server, "shop/order-1", 1, 1)
}

func TestReplayAnswersTheOriginalCharge(t *testing.T) {
	ts := newTestServer(t)
	first := ts.charge(t, "k", chargeBody)
	wantStatus(t, first, http.StatusCreated)
	// Same intent, different spelling: key order, whitespace, number form.
	replay := ts.charge(t, "k", `{ "order":"42", "customer":"cus_1", "currency":"EUR", "amount":4.2e3 }`)
	wantStatus(t, replay, http.StatusOK)
	if got := replay.header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("Idempotent-Replayed = %q, want true", got)
	}
	if diff := cmp.Diff(first.charge(t), replay.charge(t)); diff != "" {
		t.Errorf("replayed charge differs (-first +replay):\n%s", diff)
	}
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestKeyReusedWithDifferentBody(t *testing.T) {
	ts := newTestServer(t)
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
	r := ts.charge(t, "k", `{"amount":4201,"currency":"EUR","customer":"cus_1","order":"42"}`)
	wantStatus(t, r, http.StatusUnprocessableEntity)
	if got, want := r.errorMessage(t), "Idempotency-Key reused with a different request body"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestIdempotencyKeyHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"missing", http.Header{}, "Idempotency-Key header is required"},
		{"empty", keyHeader(""), "Idempotency-Key header is required"},
		{"empty quoted", keyHeader(`""`), "Idempotency-Key header is required"},
		{"unterminated quote", keyHeader(`"abc`), "Idempotency-Key header is not a well-formed quoted string"},
		{"lone quote", keyHeader(`"`), "Idempotency-Key header is not a well-formed quoted string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			r := ts.do(t, http.MethodPost, "/charges", chargeBody, tc.header)
			wantStatus(t, r, http.StatusBadRequest)
			if got := r.errorMessage(t); got != tc.want {
				t.Errorf("error = %q, want %q", got, tc.want)
			}
			if ts.TotalRequests() != 1 || ts.TotalEffects() != 0 {
				t.Errorf("totals = %d requests, %d effects; want 1, 0", ts.TotalRequests(), ts.TotalEffects())
			}
		})
	}
}

func TestQuotedAndBareKeysAreTheSameKey(t *testing.T) {
	ts := newTestServer(t)
	first := ts.do(t, http.MethodPost, "/charges", chargeBody, keyHeader(`"shop/order-7"`))
	wantStatus(t, first, http.StatusCreated)
	second := ts.do(t, http.MethodPost, "/charges", chargeBody, keyHeader(`shop/order-7`))
	wantStatus(t, second, http.StatusOK)
	if a, b := first.charge(t).ID, second.charge(t).ID; a != b {
		t.Errorf("ids differ: %s, %s", a, b)
	}
	wantCounts(t, ts.Server, "shop/order-7", 2, 1)
}

func TestInvalidBodies(t *testing.T) {
	for _, tc := range []struct {
		name, body, field string
	}{
		{"not JSON", `{"amount":`, "JSON"},
		{"trailing data", `{"amount":1,"currency":"EUR"} {}`, "JSON"},
		{"array", `[1]`, "object"},
		{"null", `null`, "object"},
		{"amount missing", `{"currency":"EUR"}`, "amount"},
		{"amount zero", `{"amount":0,"currency":"EUR"}`, "amount"},
		{"amount negative", `{"amount":-5,"currency":"EUR"}`, "amount"},
		{"amount fractional", `{"amount":1.5,"currency":"EUR"}`, "amount"},
		{"amount string", `{"amount":"100","currency":"EUR"}`, "amount"},
		{"currency missing", `{"amount":100}`, "currency"},
		{"currency lowercase", `{"amount":100,"currency":"eur"}`, "currency"},
		{"currency too long", `{"amount":100,"currency":"EURO"}`, "currency"},
		{"currency not a string", `{"amount":100,"currency":978}`, "currency"},
		{"customer not a string", `{"amount":100,"currency":"EUR","customer":7}`, "customer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			r := ts.charge(t, "k", tc.body)
			wantStatus(t, r, http.StatusBadRequest)
			if msg := r.errorMessage(t); !strings.Contains(msg, tc.field) {
				t.Errorf("error %q does not name %q", msg, tc.field)
			}
			wantCounts(t, ts.Server, "k", 1, 0)
		})
	}
}

func TestLookup(t *testing.T) {
	ts := newTestServer(t)
	committed := ts.charge(t, "shop/order-42", chargeBody).charge(t)
	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{"key escaped", "/charges/by-key/shop%2Forder-42", http.StatusOK},
		{"key with literal slash", "/charges/by-key/shop/order-42", http.StatusOK},
		{"unknown key", "/charges/by-key/shop%2Forder-43", http.StatusNotFound},
		{"id", "/charges/" + committed.ID, http.StatusOK},
		{"unknown id", "/charges/ch_000000000000000000000000", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ts.do(t, http.MethodGet, tc.path, "", nil)
			wantStatus(t, r, tc.status)
			if tc.status != http.StatusOK {
				if msg := r.errorMessage(t); !strings.HasPrefix(msg, "no charge with this") {
					t.Errorf("error = %q", msg)
				}
				return
			}
			if diff := cmp.Diff(committed, r.charge(t)); diff != "" {
				t.Errorf("charge (-committed +looked up):\n%s", diff)
			}
		})
	}
}

func TestFaultUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    Fault
		failures int
	}{
		{"count defaults to one", Fault{Mode: FaultUnavailable, RetryAfter: 7}, 1},
		{"count three", Fault{Mode: FaultUnavailable, Count: 3, RetryAfter: 7}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			ts.InjectFault(tc.fault)
			for i := range tc.failures {
				r := ts.charge(t, "k", chargeBody)
				wantStatus(t, r, http.StatusServiceUnavailable)
				if got := r.header.Get("Retry-After"); got != "7" {
					t.Errorf("request %d: Retry-After = %q, want 7", i, got)
				}
				if ts.Effects("k") != 0 {
					t.Fatalf("request %d committed", i)
				}
			}
			wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
			wantCounts(t, ts.Server, "k", tc.failures+1, 1)
		})
	}
}

func TestFaultDropAfterCommit(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultDropAfterCommit})
	_, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("err = %v, want EOF or connection reset", err)
	}
	wantCounts(t, ts.Server, "k", 1, 1)
	found := ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil)
	wantStatus(t, found, http.StatusOK)
	retry := ts.charge(t, "k", chargeBody)
	wantStatus(t, retry, http.StatusOK)
	if a, b := found.charge(t).ID, retry.charge(t).ID; a != b {
		t.Errorf("retry answered %s, lookup %s", b, a)
	}
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestFaultDropBeforeCommit(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultDropBeforeCommit})
	_, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("err = %v, want EOF or connection reset", err)
	}
	wantCounts(t, ts.Server, "k", 1, 0)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusNotFound)
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestLookupOfAKeyInProgressIsNotAbsent(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultDelay, Delay: time.Second})
	first := make(chan response, 1)
	go func() {
		r, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		first <- r
	}()
	waitFor(t, "the request claims the key", func() bool { return claimed(ts.Server, "k") })
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusConflict)
	wantStatus(t, <-first, http.StatusCreated)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusOK)
}

func TestFaultErrorAfterCommit(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultErrorAfterCommit})
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusInternalServerError)
	wantCounts(t, ts.Server, "k", 1, 1)
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusOK)
	wantCounts(t, ts.Server, "k", 2, 1)
}

// waitFor polls cond, which the server reaches asynchronously.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// claimed reports whether a request has claimed key; white-box, so that
// tests wait for the in-progress state instead of sleeping.
func claimed(s *Server, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byKey[key]
	return ok
}

func TestFaultDelayMakesConcurrentRequestsConflict(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultDelay, Delay: time.Second})
	first := make(chan response, 1)
	go func() {
		r, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		first <- r
	}()
	waitFor(t, "the first request claims the key", func() bool { return claimed(ts.Server, "k") })

	second := ts.charge(t, "k", chargeBody)
	wantStatus(t, second, http.StatusConflict)
	if got := second.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	if got, want := second.errorMessage(t), "a request with this Idempotency-Key is in progress"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	if ts.Effects("k") != 0 {
		t.Error("committed before the delay ended")
	}
	wantStatus(t, <-first, http.StatusCreated)
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestFaultDelayCommitsWhenClientGivesUp(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultDelay, Delay: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ts.send(ctx, http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
		done <- err
	}()
	waitFor(t, "the request claims the key", func() bool { return claimed(ts.Server, "k") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	waitFor(t, "the abandoned request commits", func() bool { return ts.Effects("k") == 1 })
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusOK)
	wantCounts(t, ts.Server, "k", 2, 1)
}

func TestConcurrentRequestsCommitOnce(t *testing.T) {
	ts := newTestServer(t)
	const n = 32
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			statuses[i] = r.status
		})
	}
	wg.Wait()
	counts := map[int]int{}
	for _, s := range statuses {
		counts[s]++
	}
	if counts[http.StatusCreated] != 1 || counts[http.StatusOK]+counts[http.StatusConflict] != n-1 {
		t.Errorf("statuses = %v, want one 201 and the rest 200 or 409", counts)
	}
	wantCounts(t, ts.Server, "k", n, 1)
}

func TestNaiveServerCommitsEveryRequest(t *testing.T) {
	ts := newTestServer(t, WithNaive())
	first := ts.charge(t, "k", chargeBody)
	wantStatus(t, first, http.StatusCreated)
	// The same request again, and even a different one, under the same key.
	second := ts.charge(t, "k", chargeBody)
	wantStatus(t, second, http.StatusCreated)
	wantStatus(t, ts.charge(t, "k", `{"amount":1,"currency":"USD"}`), http.StatusCreated)
	wantCounts(t, ts.Server, "k", 3, 3)
	if ts.TotalEffects() != 3 {
		t.Errorf("TotalEffects = %d, want 3", ts.TotalEffects())
	}
	firstID, secondID := first.charge(t).ID, second.charge(t).ID
	if firstID == secondID {
		t.Fatalf("both requests answered charge %s, want two charges", firstID)
	}

	// Lookup by key names the first charge; each charge keeps its own id.
	if got := ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil).charge(t).ID; got != firstID {
		t.Errorf("lookup by key = %s, want the first charge %s", got, firstID)
	}
	if got := ts.do(t, http.MethodGet, "/charges/"+secondID, "", nil).charge(t).ID; got != secondID {
		t.Errorf("GET /charges/%s = %s", secondID, got)
	}
	if c, _ := ts.Charge("k"); c.ID != firstID {
		t.Errorf("Charge(k) = %s, want the first charge %s", c.ID, firstID)
	}

	// A request in progress makes the lookup answer 409, charged key or not.
	held := ts.holdCharge(t, "k", time.Second)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusConflict)
	// Naive means no in-progress conflict for a concurrent request either.
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
	wantStatus(t, <-held, http.StatusCreated)
	wantCounts(t, ts.Server, "k", 5, 5)
	lookup := ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil)
	wantStatus(t, lookup, http.StatusOK)
	if got := lookup.charge(t).ID; got != firstID {
		t.Errorf("lookup by key after more charges = %s, want the first charge %s", got, firstID)
	}
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/other", "", nil), http.StatusNotFound)
}

func TestLookupFaultIsSeparateFromChargeFaults(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultLookupUnavailable})
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusServiceUnavailable)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusOK)
}

func TestClearFaults(t *testing.T) {
	ts := newTestServer(t)
	ts.InjectFault(Fault{Mode: FaultUnavailable, Count: 5})
	ts.InjectFault(Fault{Mode: FaultLookupUnavailable})
	wantStatus(t, ts.do(t, http.MethodDelete, "/_admin/faults", "", nil), http.StatusNoContent)
	wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusOK)
}

func TestAdminInjectFault(t *testing.T) {
	ts := newTestServer(t)
	r := ts.do(t, http.MethodPost, "/_admin/faults", `{"mode":"unavailable","count":2,"retryAfterSeconds":3}`, nil)
	wantStatus(t, r, http.StatusNoContent)
	r = ts.do(t, http.MethodPost, "/_admin/faults", `{"mode":"delay","delay":"10ms"}`, nil)
	wantStatus(t, r, http.StatusNoContent)
	for range 2 {
		r := ts.charge(t, "a", chargeBody)
		wantStatus(t, r, http.StatusServiceUnavailable)
		if got := r.header.Get("Retry-After"); got != "3" {
			t.Errorf("Retry-After = %q, want 3", got)
		}
	}
	wantStatus(t, ts.charge(t, "a", chargeBody), http.StatusCreated) // delayed
	wantStatus(t, ts.charge(t, "b", chargeBody), http.StatusCreated)
	ts.do(t, http.MethodPost, "/charges", chargeBody, nil)

	r = ts.do(t, http.MethodGet, "/_admin/stats", "", nil)
	wantStatus(t, r, http.StatusOK)
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("stats %q: %v", r.body, err)
	}
	want := map[string]any{
		"requests":      map[string]any{"a": 3.0, "b": 1.0},
		"effects":       map[string]any{"a": 1.0, "b": 1.0},
		"totalRequests": 5.0, // the keyless request counts in the total only
		"totalEffects":  2.0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestAdminRefusesBadFaults(t *testing.T) {
	for _, body := range []string{
		`not json`,
		`{"mode":"explode"}`,
		`{"mode":"delay"}`,
		`{"mode":"delay","delay":"soon"}`,
		`{"mode":"unavailable","count":-1}`,
		`{"mode":"unavailable","retryAfter":5}`,
	} {
		t.Run(body, func(t *testing.T) {
			ts := newTestServer(t)
			r := ts.do(t, http.MethodPost, "/_admin/faults", body, nil)
			wantStatus(t, r, http.StatusBadRequest)
			if msg := r.errorMessage(t); !strings.HasPrefix(msg, "invalid fault: ") {
				t.Errorf("error = %q", msg)
			}
			wantStatus(t, ts.charge(t, "k", chargeBody), http.StatusCreated)
		})
	}
}

func TestFaultJSON(t *testing.T) {
	f := Fault{Mode: FaultDelay, Count: 2, Delay: 1500 * time.Millisecond}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"mode":"delay","count":2,"delay":"1.5s"}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var back Fault
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestProvenanceAndAuthorization(t *testing.T) {
	ts := newTestServer(t)
	h := keyHeader(`"k"`)
	h.Set("Authorization", "Bearer first")
	h.Set("Toolledger-Run-Id", "run-1")
	h.Set("Toolledger-Principals", "alice, agent-7")
	h.Set("X-Unrelated", "x")
	wantStatus(t, ts.do(t, http.MethodPost, "/charges", chargeBody, h), http.StatusCreated)

	h = keyHeader(`"k"`)
	h.Set("Authorization", "Bearer second")
	h.Set("Toolledger-Run-Id", "run-2")
	wantStatus(t, ts.do(t, http.MethodPost, "/charges", chargeBody, h), http.StatusOK)

	want := http.Header{"Toolledger-Run-Id": {"run-1"}, "Toolledger-Principals": {"alice, agent-7"}}
	if diff := cmp.Diff(want, ts.ProvenanceHeaders("k")); diff != "" {
		t.Errorf("provenance (-want +got):\n%s", diff)
	}
	if got := ts.ProvenanceHeaders("unknown"); got != nil {
		t.Errorf("ProvenanceHeaders(unknown) = %v, want nil", got)
	}
	if got := ts.LastAuthorization(); got != "Bearer second" {
		t.Errorf("LastAuthorization = %q, want Bearer second", got)
	}
}

func TestRoutes(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{http.MethodGet, "/healthz", http.StatusOK, "ok"},
		{http.MethodGet, "/nope", http.StatusNotFound, ""},
		{http.MethodGet, "/charges", http.StatusMethodNotAllowed, ""},
		{http.MethodPut, "/_admin/faults", http.StatusMethodNotAllowed, ""},
	} {
		r := ts.do(t, tc.method, tc.path, "", nil)
		if r.status != tc.status {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, r.status, tc.status)
		}
		if tc.body != "" && string(r.body) != tc.body {
			t.Errorf("%s %s body = %q, want %q", tc.method, tc.path, r.body, tc.body)
		}
	}
}

// lockedBuffer is a log sink the handler goroutines and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

type logEntry struct {
	Method, Path, Key string
	Status            int
}

func TestLogRequests(t *testing.T) {
	s := NewServer()
	var sink lockedBuffer
	srv := httptest.NewServer(LogRequests(s, slog.New(slog.NewJSONHandler(&sink, nil))))
	t.Cleanup(srv.Close)
	ts := &testServer{Server: s, url: srv.URL, client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}

	wantStatus(t, ts.charge(t, "shop/order-1", chargeBody), http.StatusCreated)
	s.InjectFault(Fault{Mode: FaultDropAfterCommit})
	if _, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(`"k"`)); err == nil {
		t.Fatal("dropped request got an answer")
	}
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/shop%2Forder-1", "", nil), http.StatusOK)
	// The dropped request's line may come after the client saw the close.
	waitFor(t, "three log lines", func() bool { return len(sink.lines()) == 3 })

	var got []logEntry
	for _, line := range sink.lines() {
		var e logEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, e)
	}
	want := []logEntry{
		{"POST", "/charges", `"shop/order-1"`, http.StatusCreated},
		{"POST", "/charges", `"k"`, 0},
		{"GET", "/charges/by-key/shop%2Forder-1", "", http.StatusOK},
	}
	sortEntries := cmpopts.SortSlices(func(a, b logEntry) bool { return a.Key+a.Path < b.Key+b.Path })
	if diff := cmp.Diff(want, got, sortEntries); diff != "" {
		t.Errorf("log entries (-want +got):\n%s", diff)
	}
}

// holdCharge sends a charge under key that the server holds for delay, and
// returns once it is in progress; its answer comes on the channel.
func (ts *testServer) holdCharge(t *testing.T, key string, delay time.Duration) <-chan response {
	t.Helper()
	ts.InjectFault(Fault{Mode: FaultDelay, Delay: delay})
	held := make(chan response, 1)
	go func() {
		r, err := ts.send(context.Background(), http.MethodPost, "/charges", chargeBody, keyHeader(strconv.Quote(key)))
		if err != nil {
			t.Errorf("held request: %v", err)
		}
		held <- r
	}()
	waitFor(t, "the held request is in progress", func() bool { return ts.inProgress(key) })
	return held
}

// The committed-only lookup answers 404 while a request is held, which the
// commit then contradicts; the by-key lookup answers 409 meanwhile. The
// stats list the key in progress until it commits.
func TestCommittedLookupIsBlindToARequestInProgress(t *testing.T) {
	ts := newTestServer(t)
	held := ts.holdCharge(t, "k", 500*time.Millisecond)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/committed/k", "", nil), http.StatusNotFound)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/by-key/k", "", nil), http.StatusConflict)
	stats := ts.do(t, http.MethodGet, "/_admin/stats", "", nil)
	if !strings.Contains(string(stats.body), `"inProgress":["k"]`) {
		t.Errorf("stats while held = %s, want k in progress", stats.body)
	}
	wantStatus(t, <-held, http.StatusCreated)
	wantStatus(t, ts.do(t, http.MethodGet, "/charges/committed/k", "", nil), http.StatusOK)
	stats = ts.do(t, http.MethodGet, "/_admin/stats", "", nil)
	if strings.Contains(string(stats.body), `"inProgress"`) {
		t.Errorf("stats after the commit = %s, want nothing in progress", stats.body)
	}
}
