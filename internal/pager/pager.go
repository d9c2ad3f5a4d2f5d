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
	return Walk(func(cont string) (string, error) {
		page := PL(new(L))
		if err := reader.List(ctx, page, append(opts, client.Continue(cont))...); err != nil {
			return "", fmt.Errorf("cannot list %s: %w", what, err)
		}
		list := items(page)
		for i := range list {
			if err := visit(&list[i]); err != nil {
				return "", err
			}
		}
		return page.GetContinue(), nil
	})
}

// Walk is the paging of every list, whichever client reads it: page reads
// the page that the continue token cont starts ("" the first) and returns
// the next page's token, "" after the last. Walk stops at page's first
// error, which it returns as it is.
func Walk(page func(cont string) (next string, err error)) error {
	for cont := ""; ; {
		next, err := page(cont)
		if err != nil || next == "" {
			return err
		}
		cont = next
	}
}
