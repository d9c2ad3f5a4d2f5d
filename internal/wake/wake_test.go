package wake

import (
	"context"
	"testing"
	"time"
)

func TestEarly(t *testing.T) {
	var e Early
	ctx := context.Background()
	e.Wake()
	e.Wake() // asks made while none waits are one
	start := time.Now()
	if !e.Sleep(ctx, time.Hour) || time.Since(start) > 10*time.Second {
		t.Fatal("a Wake before the Sleep did not end it at once")
	}
	start = time.Now()
	if !e.Sleep(ctx, 50*time.Millisecond) || time.Since(start) < 50*time.Millisecond {
		t.Fatal("the second Wake was not folded into the first: the next Sleep ended early")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if e.Sleep(done, time.Hour) {
		t.Error("Sleep reported true after its context ended")
	}
}
