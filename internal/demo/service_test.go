package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestServiceServesLogsAndShutsDown(t *testing.T) {
	var logged bytes.Buffer
	service, err := Start(context.Background(), "127.0.0.1:0", slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(service.Addr(), ":0") {
		t.Fatalf("Addr() = %s, want the port the listener got", service.Addr())
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+service.Addr()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET /healthz = %d %q (%v), want 200 ok", resp.StatusCode, body, err)
	}
	if err := service.Shutdown(); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	if err := <-service.Served(); err != nil {
		t.Errorf("Served() after Shutdown = %v, want nil", err)
	}
	if !strings.Contains(logged.String(), "path=/healthz") {
		t.Errorf("log = %q, want a line for the request", logged.String())
	}
}
