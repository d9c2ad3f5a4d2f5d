package testenv

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as an OTLP receiver got it: ids in hex, attributes by key
// (strings, booleans and integers as Go values).
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	// Kind is OTLP's: 1 internal, 2 server, 3 client.
	Kind int32
	// Service is the resource's service.name.
	Service    string
	Attributes map[string]any
	// Error says the span's status is Error.
	Error bool
	// Links are the spans it links to.
	Links []Link
}

// Link is a span's link to another span, ids in hex.
type Link struct {
	TraceID, SpanID string
	Attributes      map[string]any
}

// OTLPReceiver is an OTLP/HTTP trace receiver (POST /v1/traces, protobuf)
// on 127.0.0.1 that keeps every span it is sent: what a collector would
// get from a program whose OTEL_EXPORTER_OTLP_ENDPOINT is URL.
type OTLPReceiver struct {
	// URL is the endpoint, http://127.0.0.1:PORT.
	URL string

	server *httptest.Server
	mu     sync.Mutex
	spans  []Span
}

// StartOTLPReceiver listens on a free loopback port.
func StartOTLPReceiver() *OTLPReceiver {
	r := &OTLPReceiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.export)
	r.server = httptest.NewServer(mux)
	r.URL = r.server.URL
	return r
}

// Close stops the receiver.
func (r *OTLPReceiver) Close() { r.server.Close() }

// Spans returns the spans received so far.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Named returns the spans received so far with the name and the
// attribute toolledger.key, of whatever trace.
func (r *OTLPReceiver) Named(name, key string) []Span {
	var spans []Span
	for _, s := range r.Spans() {
		if s.Name == name && s.Attributes["toolledger.key"] == key {
			spans = append(spans, s)
		}
	}
	return spans
}

// Trace returns the spans received so far of one trace.
func (r *OTLPReceiver) Trace(traceID string) []Span {
	var spans []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			spans = append(spans, s)
		}
	}
	return spans
}

func (r *OTLPReceiver) export(w http.ResponseWriter, req *http.Request) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("content type %q: only application/x-protobuf is received", ct), http.StatusUnsupportedMediaType)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spans []Span
	for _, rs := range export.GetResourceSpans() {
		service, _ := attributes(rs.GetResource().GetAttributes())["service.name"].(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				var links []Link
				for _, l := range s.GetLinks() {
					links = append(links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId()),
						Attributes: attributes(l.GetAttributes())})
				}
				spans = append(spans, Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: int32(s.GetKind()),
					Service: service, Attributes: attributes(s.GetAttributes()), Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Links: links,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attributes(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}
