package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestServeAnswersUntilTheContextEnds(t *testing.T) {
	var lc net.ListenConfig
	listener, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, listener, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), "", "")
	}()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+listener.Addr().String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("body %q, want ok", body)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after the context ended, want nil", err)
		}
	case <-time.After(shutdownGrace + time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
}

func TestIsLoopback(t *testing.T) {
	for hostport, want := range map[string]bool{
		"127.0.0.1:8090": true, "[::1]:8090": true, "127.0.0.1": true,
		"localhost:8090": false, "0.0.0.0:8090": false, "192.0.2.1:8090": false, ":8090": false,
	} {
		if got := IsLoopback(hostport); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", hostport, got, want)
		}
	}
}
