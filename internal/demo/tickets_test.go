package demo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestTicketsTakeNoKeyAndAreFoundByReference(t *testing.T) {
	srv := httptest.NewServer(NewServer())
	defer srv.Close()
	post := func(key string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/tickets", strings.NewReader(`{"correlation_id":"INC-4417","title":"Disk full"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The same key twice: the service ignores it, so two tickets open.
	if a, b := post(`"k"`), post(`"k"`); a != http.StatusCreated || b != http.StatusCreated {
		t.Fatalf("POST /tickets answered %d and %d, want 201 twice", a, b)
	}
	resp := get(t, srv.URL+"/tickets?correlation_id=INC-4417")
	defer func() { _ = resp.Body.Close() }()
	var found struct{ Data []Ticket }
	if err := json.NewDecoder(resp.Body).Decode(&found); err != nil {
		t.Fatal(err)
	}
	if len(found.Data) != 2 || found.Data[0].ID != "T-1" || found.Data[1].ID != "T-2" || found.Data[0].CorrelationID != "INC-4417" {
		t.Errorf("search found %+v, want T-1 and T-2 of INC-4417", found.Data)
	}
	srvState := srv.Config.Handler.(*Server)
	if n := srvState.Effects("INC-4417"); n != 2 {
		t.Errorf("Effects = %d, want 2", n)
	}
	other := get(t, srv.URL+"/tickets?correlation_id=INC-1")
	defer func() { _ = other.Body.Close() }()
	var none struct{ Data []Ticket }
	if err := json.NewDecoder(other.Body).Decode(&none); err != nil || none.Data == nil || len(none.Data) != 0 {
		t.Errorf("search of another reference = %+v (%v), want an empty list", none.Data, err)
	}
}

func TestTicketFaults(t *testing.T) {
	s := NewServer()
	srv := httptest.NewServer(s)
	defer srv.Close()
	s.InjectFault(Fault{Mode: FaultDropAfterCommit})
	s.InjectFault(Fault{Mode: FaultDropBeforeCommit})
	for range 2 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/tickets", strings.NewReader(`{"correlation_id":"INC-1","title":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("POST answered %d, want the connection dropped", resp.StatusCode)
		}
	}
	if n := s.Effects("INC-1"); n != 1 {
		t.Errorf("Effects = %d, want 1: dropped after commit opens the ticket, before commit does not", n)
	}
}
