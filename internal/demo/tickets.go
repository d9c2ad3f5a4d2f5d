package demo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Ticket is an issue in the demo's ticket system, which takes no
// idempotency key at all: every accepted POST /tickets opens a ticket. What
// makes a ticket for an incident findable is its business reference,
// correlation_id, which GET /tickets?correlation_id= searches by. The search
// sees every committed ticket at once; a ticket still being opened is not
// listed yet.
type Ticket struct {
	ID            string    `json:"id"`
	CorrelationID string    `json:"correlation_id"`
	Title         string    `json:"title"`
	Status        string    `json:"status"`
	Created       time.Time `json:"created"`
}

// createTicket opens a ticket. It consumes the same fault queue as charges,
// one fault per valid request. Effects and requests are counted under the
// correlation id.
func (s *Server) createTicket(w http.ResponseWriter, r *http.Request) {
	var t Ticket
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&t); err != nil || t.CorrelationID == "" || t.Title == "" {
		s.countRequest("", r.Header.Get("Authorization"))
		writeError(w, http.StatusBadRequest, "a ticket needs a JSON body with correlation_id and title")
		return
	}
	s.countRequest(t.CorrelationID, r.Header.Get("Authorization"))
	fault := s.nextFault(&s.chargeFaults)
	switch fault.Mode {
	case FaultUnavailable:
		writeError(w, http.StatusServiceUnavailable, "service unavailable")
		return
	case FaultDropBeforeCommit:
		dropConnection(w)
		return
	case FaultDelay:
		time.Sleep(fault.Delay)
	}
	t = s.openTicket(t)
	switch fault.Mode {
	case FaultDropAfterCommit:
		dropConnection(w)
	case FaultErrorAfterCommit:
		writeError(w, http.StatusInternalServerError, "internal server error")
	default:
		writeJSON(w, http.StatusCreated, t)
	}
}

func (s *Server) openTicket(t Ticket) Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticketCount++
	t.ID = fmt.Sprintf("T-%d", s.ticketCount)
	t.Status = "open"
	t.Created = time.Now().UTC()
	s.tickets[t.CorrelationID] = append(s.tickets[t.CorrelationID], t)
	s.effects[t.CorrelationID]++
	s.totalEffects++
	return t
}

// searchTickets lists the tickets of a correlation id, oldest first, as
// {"data": [...]}; lookup faults make it answer 503.
func (s *Server) searchTickets(w http.ResponseWriter, r *http.Request) {
	if s.nextFault(&s.lookupFaults).Mode == FaultLookupUnavailable {
		writeError(w, http.StatusServiceUnavailable, "service unavailable")
		return
	}
	ref := r.URL.Query().Get("correlation_id")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "correlation_id is required")
		return
	}
	s.mu.Lock()
	found := append([]Ticket{}, s.tickets[ref]...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string][]Ticket{"data": found})
}
