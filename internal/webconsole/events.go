package webconsole

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// eventsPath serves the event streams of live pages.
const eventsPath = "/events"

const (
	// eventsLifetime bounds one event stream; the browser's EventSource
	// opens the next one by itself.
	eventsLifetime = 5 * time.Minute
	// eventsDebounce gathers a burst of changes (an action passing through
	// several phases) into one event.
	eventsDebounce = 250 * time.Millisecond
	// eventsKeepAlive keeps proxies from closing an idle stream.
	eventsKeepAlive = 25 * time.Second
)

// events streams server-sent events, "changed", whenever a ToolAction of
// the namespace (or the one named) changes, from a watch made as the user:
// a page with JavaScript then reads itself again. It sends nothing but that
// an update is due, so it shows nothing the page would not.
func (s *Server) events(w http.ResponseWriter, r *http.Request, u *user) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	ns := s.namespaceOf(r)
	if problem := validNamespace(ns); problem != "" {
		http.Error(w, problem, http.StatusBadRequest)
		return
	}
	selector := ""
	if name := r.URL.Query().Get("name"); name != "" {
		selector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	ctx, cancel := context.WithTimeout(r.Context(), eventsLifetime)
	defer cancel()
	watcher, err := u.ledger.WatchActions(ctx, listScope(ns), selector)
	if err != nil {
		http.Error(w, err.Error(), apiStatus(err))
		return
	}
	defer watcher.Stop()
	w.Header().Set("Content-Type", "text/event-stream")
	// Proxies that buffer answers (nginx) would hold the events back.
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()

	keepAlive := time.NewTicker(eventsKeepAlive)
	defer keepAlive.Stop()
	var due <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case e, open := <-watcher.ResultChan():
			if !open {
				return
			}
			if e.Type != watch.Bookmark && due == nil {
				due = time.After(eventsDebounce)
			}
		case <-due:
			due = nil
			fmt.Fprint(w, "event: changed\ndata: {}\n\n")
			flusher.Flush()
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			flusher.Flush()
		}
	}
}
