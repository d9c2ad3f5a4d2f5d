package notify

import (
	"net/http"
	"testing"
	"time"
)

// The signature reproduces the test vector the Standard Webhooks reference
// implementations publish, so that a receiver's own library of the
// standard verifies what the notifier sends.
func TestSignStandardWebhooksTestVector(t *testing.T) {
	key, err := ParseSigningKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	sign(h, key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	for name, want := range map[string]string{
		"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		"webhook-timestamp": "1614265330",
		"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}
