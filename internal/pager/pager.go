// Package pager reads a list from the API server a page at a time, so that
// no response, and no slice in memory, grows with the ledger.
package pager

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PageSize bounds what one list request brings into memory at once.
const PageSize = 500

// Each reads the objects opts select from reader into lists of type L, a
// page at a time, and hands each item (items gives a page's) to visit,
// stopping at its first error, which it returns as it is; what names the
// objects when a list fails.
func Each[T, L any, PL interface {
	*L
	client.ObjectList
}](ctx context.Context, reader client.Reader, what string, items func(PL) []T, opts []client.ListOption, visit func(*T) error) error {
	opts = append(opts, client.Limit(PageSize))
	for {
		page := PL(new(L))
		if err := reader.List(ctx, page, opts...); err != nil {
			return fmt.Errorf("cannot list %s: %w", what, err)
		}
		list := items(page)
		for i := range list {
			if err := visit(&list[i]); err != nil {
				return err
			}
		}
		if page.GetContinue() == "" {
			return nil
		}
		opts = append(opts, client.Continue(page.GetContinue()))
	}
}
