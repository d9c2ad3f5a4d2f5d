package kubectlplugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

func tombstone(namespace, name string, tool v1alpha1.ToolReference) v1alpha1.Tombstone {
	return v1alpha1.Tombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Record: v1alpha1.TombstoneRecord{
			ActionUID:        "3f6d2c4e-0000-4000-8000-000000000001",
			RequestDigest:    "sha256:362d4b1d",
			Phase:            v1alpha1.PhaseSucceeded,
			ExternalRef:      "ch_1",
			Attempts:         1,
			CompletionTime:   at(-5 * time.Hour),
			ToolRef:          tool,
			IdempotencyClass: v1alpha1.KeyProtected,
			Cause:            v1alpha1.TombstoneCauseDeleted,
			DeletionTime:     at(-10 * time.Minute),
		},
	}
}

var (
	chargeTool   = v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}
	refundTool   = v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "refund"}
	platformTool = v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"}
)

// catalog has charge (keyRetention 24h) and refund (none) in shop, and
// ClusterTool platform-charge (keyRetention 1h).
func catalog() ledgerclient.ToolRetentions {
	tools := ledgerclient.NewToolRetentions()
	tools.Retentions[ledgerclient.ToolKey{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge"}] = &metav1.Duration{Duration: 24 * time.Hour}
	tools.Retentions[ledgerclient.ToolKey{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "refund"}] = nil
	tools.Retentions[ledgerclient.ToolKey{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"}] = &metav1.Duration{Duration: time.Hour}
	return tools
}

func TestWriteTombstone(t *testing.T) {
	tomb := tombstone("shop", "order-1", chargeTool)
	var out bytes.Buffer
	if err := writeTombstone(&out, &tomb, catalog().KeyFreed(&tomb), now); err != nil {
		t.Fatal(err)
	}
	want := `Name:                order-1
Namespace:           shop
Record:              deleted; this is its Tombstone, which keeps the key
Deleted:             2026-11-30T11:50:00Z (10m ago)
Cause:               Deleted: someone deleted the ToolAction (a user, a GitOps prune, the garbage collector)
Outcome:             Succeeded
External ref:        ch_1
Error:               <none>
Attempts:            1
Completed:           2026-11-30T07:00:00Z (5h ago)
Tool:                charge
Idempotency class:   KeyProtected
Request digest:      sha256:362d4b1d
Key freed:           2026-12-01T07:00:00Z (in 19h): the completion plus the tool's keyRetention of 24h
Until the key is freed, a ToolAction created again under it is not dispatched:
the same request shows this outcome, another fails with DuplicateConflict.
`
	if out.String() != want {
		t.Errorf("tombstone:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWriteTombstoneOfARetiredFailure(t *testing.T) {
	tomb := tombstone("shop", "order-2", platformTool)
	tomb.Record.Phase, tomb.Record.ExternalRef, tomb.Record.IdempotencyClass = v1alpha1.PhaseFailed, "", ""
	tomb.Record.ErrorClass, tomb.Record.ErrorReason = v1alpha1.ErrorClassRetriesExhausted, "ProviderUnavailable"
	tomb.Record.Cause, tomb.Record.DeletedBy = v1alpha1.TombstoneCauseRecordRetention, "toolledger (executor-a)"
	var out bytes.Buffer
	if err := writeTombstone(&out, &tomb, catalog().KeyFreed(&tomb), now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nCause:               RecordRetention: the tool's recordRetention passed\n",
		"\nDeleted by:          toolledger (executor-a)\n",
		"\nOutcome:             Failed\n",
		"\nExternal ref:        <none>\n",
		"\nError:               RetriesExhausted (ProviderUnavailable)\n",
		"\nTool:                ClusterTool/platform-charge\n",
		"\nIdempotency class:   <unknown>\n",
		"\nKey freed:           2026-11-30T08:00:00Z (4h ago): the completion plus the tool's keyRetention of 60m; the key is free, and the manager deletes the tombstone\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tombstone does not contain %q:\n%s", want, out.String())
		}
	}
}

func TestDescribeFreed(t *testing.T) {
	for freed, want := range map[*ledgerclient.KeyFreed]string{
		{By: ledgerclient.FreedByAdministrator}:                      "kept until an administrator deletes it (the tool has no keyRetention)",
		{By: ledgerclient.FreedUnknown, Reason: "tool not found"}:    "unknown (tool not found)",
		{By: ledgerclient.FreedUnknown, Reason: "cannot get Tool x"}: "unknown (cannot get Tool x)",
	} {
		if got := describeFreed(*freed, now); got != want {
			t.Errorf("describeFreed(%+v) = %q, want %q", *freed, got, want)
		}
	}
}

func TestWriteTombstones(t *testing.T) {
	failed := tombstone("shop", "order-3", refundTool)
	failed.Record.Phase, failed.Record.ExternalRef, failed.Record.ErrorClass = v1alpha1.PhaseFailed, "", v1alpha1.ErrorClassInvalidInput
	failed.Record.CompletionTime, failed.Record.Cause = at(-50*time.Hour), v1alpha1.TombstoneCauseRecordRetention
	tombs := []v1alpha1.Tombstone{
		tombstone("billing", "order-9", chargeTool),
		tombstone("shop", "order-1", chargeTool),
		tombstone("shop", "order-2", platformTool),
		failed,
	}
	list := ledgerclient.BuildTombstones(tombs, catalog())

	var table bytes.Buffer
	if err := writeTombstones(&table, list, true, now); err != nil {
		t.Fatal(err)
	}
	want := `NAMESPACE   KEY       TOOL                          OUTCOME     EXTERNAL-REF   COMPLETED   CAUSE             FREED
billing     order-9   charge                        Succeeded   ch_1           5h          Deleted           -
shop        order-1   charge                        Succeeded   ch_1           5h          Deleted           in 19h
shop        order-2   ClusterTool/platform-charge   Succeeded   ch_1           5h          Deleted           4h ago
shop        order-3   refund                        Failed      <none>         2d2h        RecordRetention   never
`
	if table.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", table.String(), want)
	}

	table.Reset()
	if err := writeTombstones(&table, ledgerclient.Tombstones{Items: list.Items[1:2]}, false, now); err != nil {
		t.Fatal(err)
	}
	want = `KEY       TOOL     OUTCOME     EXTERNAL-REF   COMPLETED   CAUSE     FREED
order-1   charge   Succeeded   ch_1           5h          Deleted   in 19h
`
	if table.String() != want {
		t.Errorf("table without namespaces:\n%s\nwant:\n%s", table.String(), want)
	}

	var out bytes.Buffer
	if err := printStructured(&out, outputJSON, ledgerclient.Tombstones{Items: list.Items[3:]}); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"items":[{"namespace":"shop","name":"order-3","tool":"refund","outcome":"Failed","errorClass":"InvalidInput",` +
		`"completionTime":"2026-11-28T10:00:00Z","cause":"RecordRetention","deletionTime":"2026-11-30T11:50:00Z","keyFreed":{"by":"Administrator"}}]}`
	if got := strings.Join(strings.Fields(out.String()), ""); got != wantJSON {
		t.Errorf("json = %s, want %s", got, wantJSON)
	}
	out.Reset()
	if err := printStructured(&out, outputJSON, ledgerclient.Tombstones{Items: list.Items[1:2]}); err != nil {
		t.Fatal(err)
	}
	if want := `"keyFreed":{"by":"KeyRetention","time":"2026-12-01T07:00:00Z","keyRetention":"24h0m0s"}`; !strings.Contains(strings.Join(strings.Fields(out.String()), ""), want) {
		t.Errorf("json = %s, want it to contain %s", out.String(), want)
	}
}

func TestBuildTombstonesEmptyIsAList(t *testing.T) {
	var out bytes.Buffer
	if err := printStructured(&out, outputJSON, ledgerclient.BuildTombstones(nil, ledgerclient.NewToolRetentions())); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(out.String()), ""); got != `{"items":[]}` {
		t.Errorf("no tombstones = %s, want an empty items list", out.String())
	}
}

func TestToolSelector(t *testing.T) {
	tests := []struct{ tool, want, err string }{
		{tool: "", want: ""},
		{tool: "charge", want: "toolledger.dev/tool=charge"},
		{tool: "Tool/charge", want: "toolledger.dev/tool=charge,toolledger.dev/tool-kind=Tool"},
		{tool: "ClusterTool/platform-charge", want: "toolledger.dev/tool=platform-charge,toolledger.dev/tool-kind=ClusterTool"},
		{tool: "Service/charge", err: `--tool "Service/charge": the kind must be Tool or ClusterTool, not "Service"`},
		{tool: "Charge_1", err: `--tool "Charge_1" cannot name a tool`},
		{tool: "Tool/", err: `--tool "Tool/" cannot name a tool`},
		{tool: strings.Repeat("a", 64), want: "toolledger.dev/tool=" + v1alpha1.ToolLabelValue(strings.Repeat("a", 64))},
	}
	for _, tt := range tests {
		got, err := toolSelector(tt.tool)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("toolSelector(%q) = %q, %v; want %q", tt.tool, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("toolSelector(%q) = %q, %v; want an error containing %q", tt.tool, got, err, tt.err)
		}
	}
}

func TestWriteStatusNamesTheTombstone(t *testing.T) {
	action := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1", CreationTimestamp: at(-time.Minute)},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		Status:     v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded},
	}
	tomb := tombstone("shop", "order-1", chargeTool)
	var out bytes.Buffer
	if err := writeStatus(&out, action, statusFacts{tomb: &tomb}, now); err != nil {
		t.Fatal(err)
	}
	want := "\nCompensated by:    <none>\nTombstone:         tombstone/order-1 keeps what the key's deleted record did: Succeeded, external ref ch_1, " +
		"completed 2026-11-30T07:00:00Z; deleted 2026-11-30T11:50:00Z (cause Deleted)\nParameters ("
	if !strings.Contains(out.String(), want) {
		t.Errorf("status does not contain %q:\n%s", want, out.String())
	}

	tomb.Record.Phase, tomb.Record.ExternalRef, tomb.Record.ErrorClass = v1alpha1.PhaseFailed, "", v1alpha1.ErrorClassInvalidInput
	out.Reset()
	if err := writeStatus(&out, action, statusFacts{tomb: &tomb}, now); err != nil {
		t.Fatal(err)
	}
	if want := "Tombstone:         tombstone/order-1 keeps what the key's deleted record did: Failed (InvalidInput), completed"; !strings.Contains(out.String(), want) {
		t.Errorf("status does not contain %q:\n%s", want, out.String())
	}

	out.Reset()
	if err := writeStatus(&out, action, statusFacts{tombErr: errors.New(`cannot get Tombstone "order-1": forbidden`)}, now); err != nil {
		t.Fatal(err)
	}
	if want := "\nTombstone:         cannot tell: cannot get Tombstone \"order-1\": forbidden\n"; !strings.Contains(out.String(), want) {
		t.Errorf("status does not contain %q:\n%s", want, out.String())
	}
}
