package demo

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
)

// maxEvents bounds the events the server keeps as a notification sink: the
// newest are kept.
const maxEvents = 1000

// Event is a CloudEvent the server received, in HTTP binary or structured
// mode, as a notification sink (POST /events): its attributes and its data.
type Event struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Source  string          `json:"source"`
	Subject string          `json:"subject,omitempty"`
	Time    string          `json:"time,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// receiveEvent acknowledges (202) a CloudEvent, in binary mode or in
// structured mode (application/cloudevents+json, as signed deliveries
// come), and keeps it; one without its required attributes is refused
// (400).
func (s *Server) receiveEvent(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "the event cannot be read")
		return
	}
	var e Event
	if mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mediaType == "application/cloudevents+json" {
		var structured struct {
			Event
			SpecVersion string `json:"specversion"`
		}
		if err := json.Unmarshal(body, &structured); err != nil || structured.SpecVersion == "" || structured.ID == "" || structured.Type == "" || structured.Source == "" {
			writeError(w, http.StatusBadRequest, "not a CloudEvent in structured mode: specversion, id, type and source are required")
			return
		}
		e = structured.Event
	} else {
		h := r.Header
		if h.Get("Ce-Specversion") == "" || h.Get("Ce-Id") == "" || h.Get("Ce-Type") == "" || h.Get("Ce-Source") == "" {
			writeError(w, http.StatusBadRequest, "not a CloudEvent in binary mode: ce-specversion, ce-id, ce-type and ce-source are required")
			return
		}
		if len(body) > 0 && !json.Valid(body) {
			writeError(w, http.StatusBadRequest, "the event's data must be JSON")
			return
		}
		e = Event{ID: h.Get("Ce-Id"), Type: h.Get("Ce-Type"), Source: h.Get("Ce-Source"), Subject: h.Get("Ce-Subject"), Time: h.Get("Ce-Time"), Data: body}
	}
	s.mu.Lock()
	s.events = append(s.events, e)
	if len(s.events) > maxEvents {
		s.events = s.events[len(s.events)-maxEvents:]
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// adminEvents lists the events received, oldest first.
func (s *Server) adminEvents(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Events())
}

// Events returns the events received so far, oldest first.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event{}, s.events...)
}
