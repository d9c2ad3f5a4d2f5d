package sdk_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/pkg/sdk"
)

// The golden keys pin the encoding: a change here changes the key of every
// recorded intent, so that in-flight workflows would repeat their effects.
func TestWorkflowKeyGolden(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		runID, stepID, operation, version string
		want                              string
	}{
		{"plain", "run-42", "step-3", "payments.charge", "v1", "run-42-step-3-payments-charge-v1-e9bcc77d073e3071"},
		{"mixed case and punctuation", "Agent Run #42", "Step 3/charge", "payments.charge", "v1", "agent-run-42-step-3-charge-payments-charge-v1-fc07ab4322297f8e"},
		{"no readable part", "", "", "", "", "1f526e408f68f138"},
		{"readable part cut", "Agent Run #42 — Überweisung", "Schritt/3", "payments.charge", "v1", "agent-run-42-berweisung-schritt-3-payments-cha-490bd316dd5b9d8d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sdk.WorkflowKey(tc.runID, tc.stepID, tc.operation, tc.version); got != tc.want {
				t.Errorf("WorkflowKey(%q, %q, %q, %q) = %q, want %q", tc.runID, tc.stepID, tc.operation, tc.version, got, tc.want)
			}
		})
	}
}

func TestArgumentsKeyGolden(t *testing.T) {
	for _, tc := range []struct {
		name      string
		arguments any
		want      string
	}{
		{"map", map[string]any{"order": "1001", "amount": 1000, "currency": "EUR"}, "payments-charge-v1-b5904a88be9d2c14"},
		{"raw JSON, other order and spelling", json.RawMessage(`{"currency":"EUR", "amount":1.0e3, "order":"1001"}`), "payments-charge-v1-b5904a88be9d2c14"},
		{"struct", struct {
			Amount   float64 `json:"amount"`
			Currency string  `json:"currency"`
			Order    string  `json:"order"`
		}{1000, "EUR", "1001"}, "payments-charge-v1-b5904a88be9d2c14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sdk.ArgumentsKey("payments.charge", "v1", tc.arguments)
			if err != nil {
				t.Fatalf("ArgumentsKey: %v", err)
			}
			if got != tc.want {
				t.Errorf("ArgumentsKey(%v) = %q, want %q", tc.arguments, got, tc.want)
			}
		})
	}
}

func TestArgumentsKeyRefusesWhatCannotBeCanonicalized(t *testing.T) {
	for _, tc := range []struct {
		name      string
		arguments any
		want      string
	}{
		{"not encodable", map[string]any{"callback": func() {}}, "cannot encode the arguments of payments.charge v1"},
		{"duplicate member", json.RawMessage(`{"amount":1,"amount":2}`), "duplicate"},
		{"integer beyond 2^53", json.RawMessage(`{"amount":12345678901234567891}`), "cannot canonicalize the arguments of payments.charge v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := sdk.ArgumentsKey("payments.charge", "v1", tc.arguments)
			if err == nil {
				t.Fatalf("ArgumentsKey = %q, want an error", key)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// Keys that must differ: a collision would make two intents one.
func TestKeysAreDistinct(t *testing.T) {
	argumentsKey := func(operation, version string, arguments any) string {
		t.Helper()
		key, err := sdk.ArgumentsKey(operation, version, arguments)
		if err != nil {
			t.Fatalf("ArgumentsKey: %v", err)
		}
		return key
	}
	for _, tc := range []struct {
		name string
		a, b string
	}{
		{"part boundaries", sdk.WorkflowKey("a-b", "c", "op", "v1"), sdk.WorkflowKey("a", "b-c", "op", "v1")},
		{"empty parts", sdk.WorkflowKey("x", "", "op", "v1"), sdk.WorkflowKey("", "x", "op", "v1")},
		{"case", sdk.WorkflowKey("Run", "s", "op", "v1"), sdk.WorkflowKey("run", "s", "op", "v1")},
		{"punctuation", sdk.WorkflowKey("run_1", "s", "op", "v1"), sdk.WorkflowKey("run.1", "s", "op", "v1")},
		{"step", sdk.WorkflowKey("run", "1", "op", "v1"), sdk.WorkflowKey("run", "2", "op", "v1")},
		{"version", sdk.WorkflowKey("run", "s", "op", "v1"), sdk.WorkflowKey("run", "s", "op", "v2")},
		{"long parts differing at the end", sdk.WorkflowKey(strings.Repeat("r", 100)+"1", "s", "op", "v1"), sdk.WorkflowKey(strings.Repeat("r", 100)+"2", "s", "op", "v1")},
		{"argument value", argumentsKey("op", "v1", map[string]any{"amount": 1000}), argumentsKey("op", "v1", map[string]any{"amount": 1001})},
		{"argument name", argumentsKey("op", "v1", map[string]any{"amount": 1}), argumentsKey("op", "v1", map[string]any{"amount2": 1})},
		{"argument type", argumentsKey("op", "v1", map[string]any{"amount": 1}), argumentsKey("op", "v1", map[string]any{"amount": "1"})},
		{"arguments operation", argumentsKey("op", "v1", map[string]any{}), argumentsKey("op2", "v1", map[string]any{})},
		{"arguments version", argumentsKey("op", "v1", map[string]any{}), argumentsKey("op", "v2", map[string]any{})},
		{"workflow and arguments domains", sdk.WorkflowKey("", "", "op", "v1"), argumentsKey("op", "v1", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.a == tc.b {
				t.Errorf("both derive %q", tc.a)
			}
		})
	}
}

func TestBatchItemKey(t *testing.T) {
	batch := sdk.WorkflowKey("run-42", "step-4", "payments.charge", "v1")
	for _, tc := range []struct {
		name, batchKey, itemID string
		want                   string
		wantErr                string
	}{
		{name: "clean ID kept", batchKey: batch, itemID: "line-1", want: batch + "-line-1"},
		{name: "digits", batchKey: "order-7", itemID: "0", want: "order-7-0"},
		{name: "upper case hashed", batchKey: "order-7", itemID: "Line-1", want: "order-7-line-1-957ba87f86572b73"},
		{name: "nothing readable", batchKey: "order-7", itemID: "☃", want: "order-7-7b286f25cb3665ed"},
		{name: "dotted batch key", batchKey: "order.7", itemID: "a", want: "order.7-a"},
		{name: "invalid batch key", batchKey: "Order 7", itemID: "a", wantErr: "is not a valid object name"},
		{name: "batch key too long", batchKey: strings.Repeat("b", 240), itemID: "a", wantErr: "leaving no room for item keys"},
		{name: "empty ID", batchKey: "order-7", itemID: "", wantErr: "batch item ID is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sdk.BatchItemKey(tc.batchKey, tc.itemID)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("BatchItemKey(%q, %q) = %q, %v; want an error containing %q", tc.batchKey, tc.itemID, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("BatchItemKey(%q, %q) = %q, %v; want %q", tc.batchKey, tc.itemID, got, err, tc.want)
			}
		})
	}
}

// Every key is a valid object name, whatever the input: unicode, control
// characters, separators only, or far too long.
func TestKeysAreValidNamesForAnyInput(t *testing.T) {
	random := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09-._/ #:@\t\n\x00éÜßİıΣσ日本語🙂\u200b\u0301")
	randomString := func() string {
		n := random.IntN(300)
		if random.IntN(4) == 0 {
			n = random.IntN(3)
		}
		var b strings.Builder
		for range n {
			b.WriteRune(alphabet[random.IntN(len(alphabet))])
		}
		return b.String()
	}
	seen := map[string]bool{}
	const samples = 500
	for range samples {
		run, step, op, version := randomString(), randomString(), randomString(), randomString()
		workflowKey := sdk.WorkflowKey(run, step, op, version)
		seen[workflowKey] = true
		argumentsKey, err := sdk.ArgumentsKey(op, version, map[string]any{"value": randomString()})
		if err != nil {
			t.Fatalf("ArgumentsKey: %v", err)
		}
		for _, key := range []string{workflowKey, argumentsKey} {
			if errs := validation.IsDNS1123Label(key); len(errs) > 0 {
				t.Fatalf("derived key %q from (%q, %q, %q, %q) is not a DNS-1123 label: %v", key, run, step, op, version, errs)
			}
		}
		itemID := randomString()
		if itemID == "" {
			continue
		}
		for _, batchKey := range []string{workflowKey, strings.Repeat("b", sdk.MaxKeyLength-17)} {
			itemKey, err := sdk.BatchItemKey(batchKey, itemID)
			if err != nil {
				t.Fatalf("BatchItemKey(%q, %q): %v", batchKey, itemID, err)
			}
			if errs := validation.IsDNS1123Subdomain(itemKey); len(errs) > 0 {
				t.Fatalf("item key %q from (%q, %q) is not a valid object name: %v", itemKey, batchKey, itemID, errs)
			}
		}
	}
	if len(seen) < samples*99/100 {
		t.Errorf("only %d distinct workflow keys from %d random inputs", len(seen), samples)
	}
}

// The names are those issued before the scope dropped the tool's kind: a
// namespace Tool's under ClientKey, a ClusterTool's under
// ClusterToolClientKey, so that every key issued then is still found.
func TestClientKeyGolden(t *testing.T) {
	for _, tc := range []struct {
		name              string
		caller, tool, key string
		derive            func(caller, tool, key string) string
		want              string
	}{
		{"uuid", "system:serviceaccount:shop:agent", "charge", "8e03978e-40d5-43e8-bc93-6894a57f9324", sdk.ClientKey, "8e03978e-40d5-43e8-bc93-6894a5-a10d6d35237fa27884e91d90c28b5801"},
		{"acp prefix", "system:serviceaccount:shop:agent", "charge", "idem_550e8400", sdk.ClientKey, "idem-550e8400-15ff17962aa46ff9a90e33c9e7d7a081"},
		{"nothing readable, issued for a ClusterTool", "alice", "charge", "___", sdk.ClusterToolClientKey, "ba02e38262f5947b64e36f233e739049"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.derive(tc.caller, tc.tool, tc.key); got != tc.want {
				t.Errorf("(%q, %q, %q) = %q, want %q", tc.caller, tc.tool, tc.key, got, tc.want)
			}
		})
	}
}

// A client key is scoped by what the caller addressed: the same key from
// another caller or for another tool name is another intent, and keys
// differing only in case or punctuation are different keys.
func TestClientKeysAreScopedAndDistinct(t *testing.T) {
	base := sdk.ClientKey("alice", "charge", "Order-1")
	for name, other := range map[string]string{
		"another caller":                         sdk.ClientKey("bob", "charge", "Order-1"),
		"another tool":                           sdk.ClientKey("alice", "refund", "Order-1"),
		"another case":                           sdk.ClientKey("alice", "charge", "order-1"),
		"punctuation":                            sdk.ClientKey("alice", "charge", "Order_1"),
		"parts shifted":                          sdk.ClientKey("alic", "echarge", "Order-1"),
		"the name once issued for a ClusterTool": sdk.ClusterToolClientKey("alice", "charge", "Order-1"),
	} {
		if other == base {
			t.Errorf("%s derives the same name %q", name, base)
		}
	}
	long := strings.Repeat("K", sdk.MaxClientKeyLength)
	for _, key := range []string{"a", long, "idem_ÜBER", "  spaced key  ", "\"quoted\""} {
		got := sdk.ClientKey("system:serviceaccount:shop:agent", "charge", key)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("ClientKey(…, %q) = %q, not a DNS-1123 label: %v", key, got, errs)
		}
	}
}

func TestValidClientKey(t *testing.T) {
	for key, want := range map[string]string{
		"8e03978e-40d5-43e8-bc93-6894a57f9324":      "",
		"1733300000000000000_AbC-d_":                "",
		strings.Repeat("k", sdk.MaxClientKeyLength): "",
		"": "the client key is empty",
		strings.Repeat("k", sdk.MaxClientKeyLength+1): "the client key is 256 characters long; at most 255 are allowed",
		"tab\there":   "the client key has a character other than printable ASCII at byte 3",
		"Überweisung": "the client key has a character other than printable ASCII at byte 0",
	} {
		err := sdk.ValidClientKey(key)
		if got := fmt.Sprint(err); (want == "" && err != nil) || (want != "" && got != want) {
			t.Errorf("ValidClientKey(%q) = %v, want %q", key, err, want)
		}
	}
}
