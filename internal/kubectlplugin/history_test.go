package kubectlplugin

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestHistoryRefusesBadFlagsBeforeAsking: each is refused with its reason,
// and without a request (the kubeconfig names no server).
func TestHistoryRefusesBadFlagsBeforeAsking(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--outcome", "Done"}, `error: --outcome "Done" is not a phase: give one of Pending, Accepted, AwaitingApproval, Executing, RetryScheduled, Succeeded, Failed, Unknown, Escalated` + "\n"},
		{[]string{"--from", "yesterday"}, `error: --from "yesterday" is not an RFC 3339 time, such as 2026-12-01T00:00:00Z` + "\n"},
		{[]string{"--until", "2026-12-01"}, `error: --until "2026-12-01" is not an RFC 3339 time, such as 2026-12-01T00:00:00Z` + "\n"},
		{[]string{"--since", "-1h"}, "error: --since -1h0m0s: give a positive duration, such as 24h\n"},
		{[]string{"--since", "1h", "--from", "2026-12-01T00:00:00Z"}, "error: give --since or --from, not both\n"},
		{[]string{"--limit", "-1"}, "error: --limit -1: give a count, or 0 for every record\n"},
	} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
			append([]string{"--kubeconfig", "/nonexistent", "history"}, c.args...))
		if code != ExitError || errOut.String() != c.want || out.Len() != 0 {
			t.Errorf("history %v: exit %d, stderr %q, stdout %q; want exit 1 and %q", c.args, code, errOut.String(), out.String(), c.want)
		}
	}
}

func TestVerifyTakesACopiedHeadForOneNamespace(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
		[]string{"--kubeconfig", "/nonexistent", "verify", "-A", "--head", "3:abc"})
	if want := "error: --head is one namespace's: give it with -n, not -A\n"; code != ExitError || errOut.String() != want {
		t.Errorf("verify -A --head: exit %d, stderr %q; want exit 1 and %q", code, errOut.String(), want)
	}
}
