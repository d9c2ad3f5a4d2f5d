package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// DefaultBatchConcurrency bounds the items of a batch invoked at once when
// BatchRequest.Concurrency is not set.
const DefaultBatchConcurrency = 8

// BatchRequest is a set of intents of one tool that belong together, such
// as the lines of an order. Each item is its own intent with its own key
// (BatchItemKey), so a re-run of the batch, or of a part of it, repeats
// nothing that already happened and finishes what did not. A key for the
// batch alone would not do: after a partial failure it could say neither
// which items happened nor let the others run.
type BatchRequest struct {
	// Namespace is the tenant.
	Namespace string
	// BatchKey is the stable identity of the batch, for example a WorkflowKey.
	BatchKey string
	// Tool names the Tool that carries out every item.
	Tool string
	// Items are the intents; their IDs must be unique within the batch.
	Items []BatchItem
	// Provenance is recorded with every item, unchanged.
	Provenance *v1alpha1.Provenance
	// Concurrency bounds the items invoked at once; DefaultBatchConcurrency
	// when zero or less.
	Concurrency int
}

// BatchItem is one intent of a batch.
type BatchItem struct {
	// ID identifies the item within the batch, stably across re-runs (a line
	// number, a SKU); it becomes part of the item's key.
	ID string
	// Parameters is the item's JSON object, encoded as Request.Parameters.
	Parameters map[string]any
}

// ItemOutcome is what became of one item: its Outcome and error as Invoke
// returned them.
type ItemOutcome struct {
	ID      string
	Key     string
	Outcome *Outcome
	Err     error
}

// InvokeBatch invokes every item of the batch under its own key, at most
// batch.Concurrency at a time, and returns their outcomes in the order of
// batch.Items. Each item costs what Invoke costs. The error is set only when
// the batch is refused before anything is sent: no items, an invalid batch
// key, an empty or repeated item ID, or two IDs that derive the same key.
// Failures of single items are in their ItemOutcome.
func (c *Client) InvokeBatch(ctx context.Context, batch BatchRequest) ([]ItemOutcome, error) {
	keys, err := batch.itemKeys()
	if err != nil {
		return nil, err
	}
	concurrency := batch.Concurrency
	if concurrency <= 0 {
		concurrency = DefaultBatchConcurrency
	}
	outcomes := make([]ItemOutcome, len(batch.Items))
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, item := range batch.Items {
		outcomes[i] = ItemOutcome{ID: item.ID, Key: keys[i]}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			outcomes[i].Outcome, outcomes[i].Err = c.Invoke(ctx, Request{
				Namespace:  batch.Namespace,
				Key:        keys[i],
				Tool:       batch.Tool,
				Parameters: item.Parameters,
				Provenance: batch.Provenance,
			})
		})
	}
	wg.Wait()
	return outcomes, nil
}

// itemKeys derives the key of every item and checks that they are distinct.
func (b BatchRequest) itemKeys() ([]string, error) {
	if len(b.Items) == 0 {
		return nil, errors.New("invalid batch: no items")
	}
	keys := make([]string, len(b.Items))
	itemByKey := make(map[string]string, len(b.Items))
	for i, item := range b.Items {
		key, err := BatchItemKey(b.BatchKey, item.ID)
		if err != nil {
			return nil, fmt.Errorf("invalid batch: item %d: %w", i, err)
		}
		if other, taken := itemByKey[key]; taken {
			if other == item.ID {
				return nil, fmt.Errorf("invalid batch: item ID %q appears more than once", item.ID)
			}
			return nil, fmt.Errorf("invalid batch: item IDs %q and %q both derive the key %q", other, item.ID, key)
		}
		itemByKey[key] = item.ID
		keys[i] = key
	}
	return keys, nil
}
