package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/digest"
)

// canonicalLinkHash is the chain document's hash as the chain first made
// it: the document marshalled, then canonicalized whole; version 2 with a
// namespace uid.
func canonicalLinkHash(t *testing.T, sequence int64, previous string, r *Record, actionText string) string {
	t.Helper()
	type chainRecord struct {
		UID              string `json:"uid"`
		Namespace        string `json:"namespace"`
		Key              string `json:"key"`
		ToolKind         string `json:"toolKind"`
		ToolName         string `json:"toolName"`
		IdempotencyClass string `json:"idempotencyClass"`
		RequestDigest    string `json:"requestDigest"`
		Phase            string `json:"phase"`
		ErrorClass       string `json:"errorClass"`
		ErrorReason      string `json:"errorReason"`
		ExternalRef      string `json:"externalRef"`
		Attempts         int32  `json:"attempts"`
		GuardsKey        bool   `json:"guardsKey"`
		CompletionTime   string `json:"completionTime"`
		Cause            string `json:"cause"`
		DeletedBy        string `json:"deletedBy"`
		DeletionTime     string `json:"deletionTime"`
		Action           string `json:"action"`
		NamespaceUID     string `json:"namespaceUID,omitempty"`
		ArchivedAt       string `json:"archivedAt,omitempty"`
	}
	version, uid, archivedAt := chainVersion1, "", ""
	if r.NamespaceUID != "" {
		version, uid, archivedAt = chainVersion2, string(r.NamespaceUID), chainTime(r.ArchivedAt)
	}
	doc, err := json.Marshal(struct {
		Chain    int         `json:"chain"`
		Sequence int64       `json:"sequence"`
		Previous string      `json:"previous"`
		Record   chainRecord `json:"record"`
	}{Chain: version, Sequence: sequence, Previous: previous, Record: chainRecord{
		UID: string(r.UID), Namespace: r.Namespace, Key: r.Key, ToolKind: r.Tool.Kind, ToolName: r.Tool.Name,
		IdempotencyClass: string(r.IdempotencyClass), RequestDigest: r.RequestDigest, Phase: string(r.Phase),
		ErrorClass: string(r.ErrorClass), ErrorReason: r.ErrorReason, ExternalRef: r.ExternalRef, Attempts: r.Attempts,
		GuardsKey: r.GuardsKey, CompletionTime: chainTime(r.CompletionTime), Cause: r.Cause, DeletedBy: r.DeletedBy,
		DeletionTime: chainTime(r.DeletionTime), Action: actionText, NamespaceUID: uid, ArchivedAt: archivedAt,
	}})
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := digest.Canonicalize(doc)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// The hash written straight into SHA-256 is the one of the canonicalized
// document, whatever the strings hold: chains made before verify alike.
func TestALinkHashIsTheCanonicalDocumentsHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z", "0", `"`, `\`, "\n", "\t", "\x00", "\x1f", "\x7f", "<", ">", "&", "\u2028", "é", "日本", "😀", "\xff", "\xc3", `{"spec": {"parameters": {"document": "x"}}}`}
	text := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := range 500 {
		r := &Record{
			UID: types.UID(text()), Namespace: text(), Key: text(), Tool: v1alpha1.ToolReference{Kind: text(), Name: text()},
			IdempotencyClass: v1alpha1.IdempotencyClass(text()), RequestDigest: text(), Phase: v1alpha1.Phase(text()),
			ErrorClass: v1alpha1.ErrorClass(text()), ErrorReason: text(), ExternalRef: text(), Attempts: rng.Int32(),
			GuardsKey: rng.IntN(2) == 0, CompletionTime: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)),
			Cause: text(), DeletedBy: text(), DeletionTime: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)),
		}
		if rng.IntN(2) == 0 {
			r.NamespaceUID, r.ArchivedAt = types.UID("ns-"+text()), time.Unix(rng.Int64N(4e9), rng.Int64N(1e9))
		}
		sequence, previous, action := rng.Int64N(1<<53), text(), text()
		got, err := linkHash(sequence, previous, r, action)
		if err != nil {
			t.Fatal(err)
		}
		if want := canonicalLinkHash(t, sequence, previous, r, action); got != want {
			t.Fatalf("record %d: %s, want %s: %+v", i, got, want, r)
		}
	}
}
