package httpcall

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

func ptr[T any](v T) *T { return &v }

// TestLookupIsStrict: only an answer that yields the effect is found, and
// only one the Tool says proves absence is absent; the rest is inconclusive
// (an error that is neither ErrNotFound nor found), which never re-sends.
func TestLookupIsStrict(t *testing.T) {
	t.Parallel()
	const (
		found        = "found"
		absent       = "absent"
		inconclusive = "inconclusive"
	)
	ticket := `{"id":"T-1","correlation_id":"4417"}`
	other := `{"id":"T-2","correlation_id":"4418"}`
	search := func(l *v1alpha1.HTTPLookup) {
		l.Strategy = v1alpha1.LookupByReference
		l.URL = strings.Replace(l.URL, "/{key}", "/tickets?correlation_id={incident}", 1)
		l.ItemsPointer = ptr("/data")
		l.Match = []v1alpha1.HTTPLookupMatch{{Field: "/correlation_id", Parameter: "/incident"}}
	}
	tests := []struct {
		name   string
		status int
		body   string
		// contentType is application/json unless set.
		contentType string
		// noExternalID: the Tool names no response.externalIDPointer.
		noExternalID bool
		configure    func(*v1alpha1.HTTPLookup)
		want         string
		wantRef      string
		wantMsg      string
	}{
		{name: "key: 200 with the id", status: 200, body: `{"id":"ch_1"}`, want: found, wantRef: "ch_1"},
		{name: "key: 200 with the id as +json", status: 200, body: `{"id":"ch_1"}`, contentType: "application/vnd.api+json; charset=utf-8",
			want: found, wantRef: "ch_1"},
		{name: "key: 200 with the id, declared HTML, is inconclusive", status: 200, body: `{"id":"ch_1"}`, contentType: "text/html",
			want: inconclusive, wantMsg: `lookup answered 200 with Content-Type "text/html", not JSON, which proves nothing`},
		{name: "key: 200 with the id, no Content-Type, is inconclusive", status: 200, body: `{"id":"ch_1"}`, contentType: "-",
			want: inconclusive, wantMsg: `lookup answered 200 with Content-Type "", not JSON, which proves nothing`},
		{name: "key, no proof field: an HTML catch-all page is inconclusive", status: 200, body: `<html><body>Welcome</body></html>`,
			contentType: "text/html; charset=utf-8", noExternalID: true, want: inconclusive,
			wantMsg: `lookup answered 200 with Content-Type "text/html; charset=utf-8", not JSON, which proves nothing`},
		{name: "key, no proof field: a JSON answer that does not carry the key is inconclusive", status: 200, body: `{"status":"ok"}`,
			noExternalID: true, want: inconclusive,
			wantMsg: "lookup answered 200 with a match that does not carry the key, which proves nothing"},
		{name: "key, no proof field: an answer carrying the key is found", status: 200, body: `{"request":{"idempotency_key":"shop/order-1"},"status":"done"}`,
			noExternalID: true, want: found},
		{name: "key, no proof field: the key within a longer string is not carried", status: 200, body: `{"path":"/charges/shop/order-1"}`,
			noExternalID: true, want: inconclusive,
			wantMsg: "lookup answered 200 with a match that does not carry the key, which proves nothing"},
		{name: "key: 200 without the external id is inconclusive", status: 200, body: `{"status":"ok"}`, want: inconclusive,
			wantMsg: "lookup answered 200 with a match that has no external id at /id, which proves nothing"},
		{name: "key: 200 that is not JSON is inconclusive", status: 200, body: `<html>ok</html>`, want: inconclusive,
			wantMsg: "lookup answered 200 with a body that is not JSON (15 bytes), which proves nothing"},
		{name: "key: 404 is inconclusive unless configured", status: 404, body: `not found`, want: inconclusive,
			wantMsg: "lookup answered 404; body of 9 bytes, sha256:"},
		{name: "key: 404 is absent when configured", status: 404, body: `{}`, want: absent,
			configure: func(l *v1alpha1.HTTPLookup) { l.NotFoundMeansAbsent = true }},
		{name: "reference: 200 [] is inconclusive", status: 200, body: `{"data":[]}`, configure: search, want: inconclusive,
			wantMsg: "lookup answered 200 with no match among 0 candidates, which proves nothing"},
		{name: "reference: 200 [] is absent when the search is consistent", status: 200, body: `{"data":[]}`, want: absent,
			configure: func(l *v1alpha1.HTTPLookup) { search(l); l.NoMatchMeansAbsent = true }},
		{name: "reference: another ticket is no match", status: 200, body: `{"data":[` + other + `]}`, configure: search, want: inconclusive,
			wantMsg: "lookup answered 200 with no match among 1 candidates"},
		{name: "reference: the ticket of the incident", status: 200, body: `{"data":[` + other + `,` + ticket + `]}`, configure: search,
			want: found, wantRef: "T-1"},
		{name: "reference: no list at the pointer is inconclusive", status: 200, body: `{"data":{}}`, configure: search, want: inconclusive,
			wantMsg: `lookup answered 200 without a list at "/data", which proves nothing`},
		{name: "reference: a bare list", status: 200, body: `[` + ticket + `]`, want: found, wantRef: "T-1",
			configure: func(l *v1alpha1.HTTPLookup) { search(l); l.ItemsPointer = ptr("") }},
		{name: "reference: 404 of the search is inconclusive", status: 404, body: ``, configure: search, want: inconclusive},
		{name: "a 500 is inconclusive", status: 500, body: `oops`, want: inconclusive, wantMsg: "lookup answered 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var header []string
			switch tc.contentType {
			case "":
				header = []string{"Content-Type", "application/json"}
			case "-": // none at all: net/http would sniff one
				header = []string{"Content-Type", ""}
			default:
				header = []string{"Content-Type", tc.contentType}
			}
			srv := newServer(t, respond(tc.status, tc.body, header...))
			tool := newTool("http://127.0.0.1:1/", func(h *v1alpha1.HTTPAdapter) {
				if !tc.noExternalID {
					h.Response.ExternalIDPointer = "/id"
				}
				h.Lookup = &v1alpha1.HTTPLookup{URL: srv.URL + "/{key}"}
				if tc.configure != nil {
					tc.configure(h.Lookup)
				}
			})
			req := request(`{"incident":4417,"title":"Disk full"}`)
			out, err := connect(t, tool, nil).Lookup(t.Context(), req)
			got := inconclusive
			switch {
			case err == nil:
				got = found
			case errors.Is(err, adapter.ErrNotFound):
				got = absent
			}
			if got != tc.want {
				t.Fatalf("lookup = %s (%+v, %v), want %s", got, out, err, tc.want)
			}
			if out.ExternalRef != tc.wantRef {
				t.Errorf("ExternalRef = %q, want %q", out.ExternalRef, tc.wantRef)
			}
			if tc.wantMsg != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantMsg)) {
				t.Errorf("error = %v\nwant prefix %q", err, tc.wantMsg)
			}
			if tc.configure != nil && tc.want != absent && strings.Contains(tc.name, "reference") {
				if uri := srv.only(t).RequestURI; uri != "/tickets?correlation_id=4417" {
					t.Errorf("search URI = %s, want the incident's reference", uri)
				}
			}
		})
	}
}

// TestLookupByReplay: within the window the request is sent again, as it
// was, and the provider's stored answer is the effect; after it nothing is
// sent and the lookup says the window closed.
func TestLookupByReplay(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		now      time.Time
		first    time.Time
		status   int
		wantSent int
		want     string
	}{
		{name: "within the window", now: first.Add(23 * time.Hour), first: first, status: 200, wantSent: 1, want: "found"},
		{name: "at the end of the window", now: first.Add(24 * time.Hour), first: first, status: 200, wantSent: 0, want: "closed"},
		{name: "no first attempt recorded", now: first, status: 200, wantSent: 0, want: "closed"},
		{name: "a replay answering 409 proves nothing", now: first.Add(time.Hour), first: first, status: 409, wantSent: 1, want: "inconclusive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(tc.status, `{"id":"ch_1"}`, "Idempotent-Replayed", "true"))
			tool := newTool(srv.URL+"/v1/charges", func(h *v1alpha1.HTTPAdapter) {
				h.Encoding = v1alpha1.EncodingForm
				h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw}
				h.Response.ExternalIDPointer = "/id"
				h.Lookup = &v1alpha1.HTTPLookup{Strategy: v1alpha1.LookupByReplay, ReplayWindow: &metav1.Duration{Duration: 24 * time.Hour}}
			})
			ex := connect(t, tool, nil).(*executor)
			ex.now = func() time.Time { return tc.now }
			req := request(`{"amount":2000,"currency":"usd"}`)
			req.FirstAttemptTime = tc.first
			out, err := ex.Lookup(t.Context(), req)
			sent := srv.requests()
			if len(sent) != tc.wantSent {
				t.Fatalf("provider received %d requests, want %d", len(sent), tc.wantSent)
			}
			switch tc.want {
			case "found":
				if want := (adapter.Outcome{ExternalRef: "ch_1", Replayed: true}); err != nil || !cmp.Equal(want, out) {
					t.Errorf("Lookup = %+v, %v; want %+v", out, err, want)
				}
				if got := wire(sent[0], "Idempotency-Key"); got != "POST /v1/charges\nContent-Type: application/x-www-form-urlencoded\nIdempotency-Key: shop/order-1\n\namount=2000&currency=usd" {
					t.Errorf("replayed request = %q, want the original request", got)
				}
			case "closed":
				if !errors.Is(err, adapter.ErrLookupWindowClosed) {
					t.Errorf("Lookup error = %v, want ErrLookupWindowClosed", err)
				}
			default:
				if err == nil || errors.Is(err, adapter.ErrNotFound) || errors.Is(err, adapter.ErrLookupWindowClosed) {
					t.Errorf("Lookup error = %v, want an inconclusive one", err)
				}
			}
		})
	}
}
