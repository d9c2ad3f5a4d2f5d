package archiveapi

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// listWriter streams a list, an ArchivedToolActionList or a Table of one,
// item by item as the records come: its members known at the start, then
// its items, then its metadata with the continue token (JSON readers do
// not mind the order). Nothing is written before the first item, so that
// a list that fails before it is answered with a Status.
type listWriter struct {
	w             http.ResponseWriter
	table         bool
	includeObject string
	started       bool
}

// encode is a record as an item of the list.
func (l *listWriter) encode(r *archive.Record) ([]byte, error) {
	object, err := Object(r)
	if err != nil {
		return nil, err
	}
	if l.table {
		return json.Marshal(tableRow(object, l.includeObject))
	}
	return json.Marshal(object)
}

func (l *listWriter) write(item []byte) error {
	separator := []byte(",")
	if !l.started {
		if err := l.begin(); err != nil {
			return err
		}
		separator = nil
	}
	if _, err := l.w.Write(append(separator, item...)); err != nil {
		return err
	}
	return nil
}

// begin writes the list's members before its items.
func (l *listWriter) begin() error {
	l.started = true
	l.w.Header().Set("Content-Type", "application/json")
	var head []byte
	if l.table {
		definitions, err := json.Marshal(columns)
		if err != nil {
			return err
		}
		head = append(append([]byte(`{"apiVersion":"meta.k8s.io/v1","kind":"Table","columnDefinitions":`), definitions...), `,"rows":[`...)
	} else {
		head = []byte(`{"apiVersion":"` + archivev1alpha1.GroupVersion.String() + `","kind":"ArchivedToolActionList","items":[`)
	}
	_, err := l.w.Write(head)
	return err
}

// finish ends the list with its metadata: continueToken names the next
// page, "" at the end.
func (l *listWriter) finish(continueToken string) {
	if !l.started {
		if err := l.begin(); err != nil {
			return
		}
	}
	meta, _ := json.Marshal(metav1.ListMeta{Continue: continueToken})
	_, _ = l.w.Write(append(append([]byte(`],"metadata":`), meta...), '}', '\n'))
}
