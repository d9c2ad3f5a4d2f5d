package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// A workflow step derives its key from the run and step its engine
// persists, so every retry and replay of the step sends the same key.
func ExampleWorkflowKey() {
	fmt.Println(sdk.WorkflowKey("run-42", "step-3", "payments.charge", "v1"))
	fmt.Println(sdk.WorkflowKey("Agent Run #42", "Step 3/charge", "payments.charge", "v1"))
	// Output:
	// run-42-step-3-payments-charge-v1-e9bcc77d073e3071
	// agent-run-42-step-3-charge-payments-charge-v1-fc07ab4322297f8e
}

// Arguments that identify the intent derive the same key however they are
// spelled.
func ExampleArgumentsKey() {
	fromModel := json.RawMessage(`{ "order": "1001", "currency": "EUR", "amount": 1e3 }`)
	fromCode := map[string]any{"amount": 1000, "currency": "EUR", "order": "1001"}
	a, err := sdk.ArgumentsKey("payments.charge", "v1", fromModel)
	if err != nil {
		log.Fatal(err)
	}
	b, err := sdk.ArgumentsKey("payments.charge", "v1", fromCode)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a)
	fmt.Println(a == b)
	// Output:
	// payments-charge-v1-b5904a88be9d2c14
	// true
}

// Each item of a batch gets its own key: clean IDs are appended as they are,
// others sanitized and made unique with a hash of the raw ID.
func ExampleBatchItemKey() {
	batchKey := sdk.WorkflowKey("run-42", "step-4", "payments.charge", "v1")
	for _, id := range []string{"line-1", "Line-1", "SKU 7/blue"} {
		key, err := sdk.BatchItemKey(batchKey, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(key)
	}
	// Output:
	// run-42-step-4-payments-charge-v1-d7e85efe5cf72e0b-line-1
	// run-42-step-4-payments-charge-v1-d7e85efe5cf72e0b-line-1-957ba87f86572b73
	// run-42-step-4-payments-charge-v1-d7e85efe5cf72e0b-sku-7-blue-89afefb5d52be435
}

// A typical tool call of an agent: a key from the workflow's identity, one
// Invoke, and a decision on the outcome's phase.
func ExampleClient_Invoke() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	client, err := sdk.NewClient(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	outcome, err := client.Invoke(ctx, sdk.Request{
		Namespace:  "shop",
		Key:        sdk.WorkflowKey("run-42", "step-3", "payments.charge", "v1"),
		Tool:       "charge",
		Parameters: map[string]any{"amount": 1000, "currency": "EUR", "customer": "cus_42"},
		Provenance: &v1alpha1.Provenance{RunID: "run-42", StepID: "step-3", Principals: []string{"user:alice", "agent:checkout"}},
	})
	var conflict *sdk.DuplicateConflictError
	switch {
	case errors.As(err, &conflict):
		// A bug in how the key is derived, never a reason to retry under another key.
		fmt.Printf("%s/%s already records a different charge\n", conflict.Namespace, conflict.Key)
		return
	case errors.Is(err, context.DeadlineExceeded):
		// The charge is recorded and goes on; the same request later reports how it ended.
		fmt.Println("still", outcome.Phase)
		return
	case err != nil:
		fmt.Println("cannot record the charge:", err)
		return
	}
	switch outcome.Phase {
	case v1alpha1.PhaseSucceeded:
		fmt.Println("charged:", outcome.ExternalRef, "deduplicated:", outcome.Deduplicated)
	case v1alpha1.PhaseFailed:
		fmt.Println("not charged:", outcome.ErrorClass, outcome.Message)
	case v1alpha1.PhaseEscalated:
		fmt.Println("unknown whether charged; a human resolves it:", outcome.Message)
	}
}
