package adapter

import (
	"errors"
	"net/url"
	"testing"
)

// TestTransportErrorShowsNoQuery: the message of a transport error reaches
// the action's status and events; a query (or user information) in the
// request's URL may carry parameters or credentials, so it is cut.
func TestTransportErrorShowsNoQuery(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection reset by peer")
	tests := []struct {
		name, url, want string
	}{
		{name: "query and fragment", url: "https://api.example/v1/charges?amount=100&customer=cus_9#x",
			want: `connection lost after the request was sent: Post "https://api.example/v1/charges": connection reset by peer`},
		{name: "user information", url: "https://user:pass@api.example:8443/v1?token=t",
			want: `connection lost after the request was sent: Post "https://api.example:8443/v1": connection reset by peer`},
		{name: "a template keeps its placeholders", url: "https://api.example/customers/{customer}/charges?expand={x}",
			want: `connection lost after the request was sent: Post "https://api.example/customers/{customer}/charges": connection reset by peer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := TransportError(&url.Error{Op: "Post", URL: tc.url, Err: cause}, true, nil)
			var ambiguous *AmbiguousError
			if !errors.As(err, &ambiguous) {
				t.Fatalf("error %T, want *AmbiguousError", err)
			}
			if got := ambiguous.Err.Error(); got != tc.want {
				t.Errorf("message = %q\nwant      %q", got, tc.want)
			}
			if !errors.Is(err, cause) {
				t.Errorf("%v does not wrap its cause", err)
			}
		})
	}
}

func TestShowURLLeavesOtherErrorsAlone(t *testing.T) {
	t.Parallel()
	plain := errors.New("boom")
	if got := ShowURL(plain, "https://api.example/x"); got != plain { //nolint:errorlint // identity is the point
		t.Errorf("ShowURL(%v) = %v, want the error itself", plain, got)
	}
}
