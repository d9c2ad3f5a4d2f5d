package archiveapi

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
)

// toolActionCRD is config/crd/bases' ToolAction CRD, copied by make
// generate: an archived record's spec and status are a ToolAction's, so
// their schema, with every field's description, is the CRD's.
//
//go:embed toolactions.crd.yaml
var toolActionCRD []byte

// openAPIPath is the group version's document under /openapi/v3.
const openAPIPath = "/openapi/v3/apis/" + "archive.toolledger.dev/v1alpha1"

// openAPI is the API's OpenAPI v3 document, which the API server
// aggregates so that kubectl explain describes ArchivedToolAction, and the
// index of /openapi/v3 that names it with its hash.
var openAPI, openAPIIndex = mustOpenAPI()

func mustOpenAPI() (doc, index []byte) {
	doc, err := buildOpenAPI()
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(doc)
	index, err = json.Marshal(map[string]any{"paths": map[string]any{
		openAPIPath[len("/openapi/v3/"):]: map[string]string{"serverRelativeURL": openAPIPath + "?hash=" + hex.EncodeToString(sum[:])},
	}})
	if err != nil {
		panic(err)
	}
	return doc, index
}

func buildOpenAPI() ([]byte, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(toolActionCRD, &crd); err != nil {
		return nil, fmt.Errorf("the embedded ToolAction CRD: %w", err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		return nil, fmt.Errorf("the embedded ToolAction CRD has %d versions, want one with a schema", len(crd.Spec.Versions))
	}
	action := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	gvk := func(kind string) []map[string]string {
		return []map[string]string{{"group": archivev1alpha1.GroupVersion.Group, "version": archivev1alpha1.GroupVersion.Version, "kind": kind}}
	}
	str := func(description string) map[string]any {
		return map[string]any{"type": "string", "description": description}
	}
	integer := func(description string) map[string]any {
		return map[string]any{"type": "integer", "format": "int64", "description": description}
	}
	link := func(description string) map[string]any {
		return map[string]any{"type": "object", "description": description, "properties": map[string]any{
			"sequence": integer("The place in the namespace's chain, from 1 without gaps."),
			"hash":     str("The hex SHA-256 of the RFC 8785 canonical JSON of the record there with the hash before it (docs/audit.md)."),
		}}
	}
	record := map[string]any{
		"type": "object",
		"description": "ArchivedToolAction is a finished ToolAction as the archive keeps it after it left etcd: its metadata " +
			"(name = idempotency key, namespace = tenant), spec and status as they were when it was retired, and why and when it " +
			"left. get returns the record of a key that answers it (else the newest), whole; list returns every record, in key order, " +
			"without what archive.omitted names.",
		"properties": map[string]any{
			"apiVersion": action["apiVersion"],
			"kind":       action["kind"],
			"metadata":   map[string]any{"type": "object", "description": "The ToolAction's metadata: name, namespace, uid, labels, annotations, creationTimestamp."},
			"spec":       action["spec"],
			"status":     action["status"],
			"archive": map[string]any{
				"type":        "object",
				"description": "What the archive adds to a record.",
				"properties": map[string]any{
					"cause":            str("Why the record left etcd: Deleted (kubectl delete, a GitOps prune), RecordRetention or KeyRetention."),
					"deletedBy":        str("The user who deleted the record, when the manager knows."),
					"deletionTime":     map[string]any{"type": "string", "format": "date-time", "description": "When the record left etcd, or was asked to."},
					"guardsKey":        map[string]any{"type": "boolean", "description": "Whether the record keeps its key: a ToolAction created again under the key is answered from it (SettledByArchive) until the tool's keyRetention has passed since its completion, and not before the keptUntil its answers stated."},
					"idempotencyClass": str("The tool's idempotency class when the record was retired."),
					"fromTombstone":    map[string]any{"type": "boolean", "description": "True for a record moved from a Tombstone written before the archive: its spec holds only the tool."},
					"chain":            link("The record's link in its namespace's hash chain (archivechains); absent for a record archived before the archive had chains."),
					"namespaceUID": str("The uid of the namespace the record was archived from. A namespace deleted and created again under its name has another, " +
						"and its own history: a namespace's reads show its own records only, a cluster-wide list every namespace's. Absent for a record archived before the archive kept it."),
					"archivedAt": map[string]any{"type": "string", "format": "date-time", "description": "When the record was archived."},
					"omitted": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "The fields a list's item leaves out, which a get of the record serves: " +
						"spec.parameters and metadata.annotations.kubectl.kubernetes.io/last-applied-configuration (kubectl's copy of them), whatever their size, " +
						"so that a list of large records stays small. Absent on a get."},
				},
			},
		},
		"x-kubernetes-group-version-kind": gvk("ArchivedToolAction"),
	}
	// list is the schema of a list of kind.
	list := func(kind, description, metadata string) map[string]any {
		return map[string]any{
			"type":        "object",
			"description": description,
			"properties": map[string]any{
				"apiVersion": action["apiVersion"],
				"kind":       action["kind"],
				"metadata":   map[string]any{"type": "object", "description": metadata},
				"items":      map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/" + schemaName(kind)}},
			},
			"x-kubernetes-group-version-kind": gvk(kind + "List"),
		}
	}
	chain := map[string]any{
		"type": "object",
		"description": "ArchiveChain is the verification of one namespace's history in the archive, made when it is read: the " +
			"manager recomputes the namespace's hash chain, from where the last complete verification ended (or from its first " +
			"record, ?full=true), for a bounded time, checks it against the checkpoints the cluster keeps, and reports how far " +
			"it got, its head once complete, or the first record at which it does not hold. Each namespace has one, named ledger.",
		"properties": map[string]any{
			"apiVersion": action["apiVersion"],
			"kind":       action["kind"],
			"metadata":   map[string]any{"type": "object", "description": "name is ledger; namespace is the tenant."},
			"status": map[string]any{
				"type":        "object",
				"description": "What the verification found.",
				"properties": map[string]any{
					"verified": map[string]any{"type": "boolean", "description": "True when the verification reached the chain's head and the chain holds: " +
						"no record was changed, deleted or rechained since it was archived, and it holds every checkpoint the cluster took."},
					"complete": map[string]any{"type": "boolean", "description": "Whether the verification reached the chain's head. A long chain is verified over " +
						"several gets, each going on, for a bounded time, from where the last stopped, until one completes."},
					"full": map[string]any{"type": "boolean", "description": "Whether the verification read the chain from its first record; one that did not " +
						"went on from where the last complete one ended, trusting the records before, whose checkpoints it checks."},
					"head":        link("The newest link the verification reached; once complete, the chain's head: copy it, and compare it with a later verification's."),
					"length":      integer("The sequence of the chain's head: how far a complete verification goes."),
					"records":     integer("Records up to head."),
					"pruned":      integer("Records deleted by --archive-history-retention, whose links the chain keeps."),
					"unchained":   integer("Records archived before the archive had chains, which nothing proves."),
					"checked":     integer("Records this get read and hashed again."),
					"checkpoints": integer("Checkpoints of the chain the cluster keeps (the managers take its head every few minutes) that it was found to hold."),
					"verifiedAt":  map[string]any{"type": "string", "format": "date-time", "description": "When the chain was recomputed."},
					"copiedHead": map[string]any{"type": "object", "description": "A head copied earlier and given with the get (?head=SEQUENCE:HASH), when the chain holds up to it.", "properties": map[string]any{
						"sequence": integer("The copied head's sequence."),
						"hash":     str("The copied head's hash."),
						"result":   str("Matches: the chain holds the same hash there; Pruned: its record was pruned inside a run, whose last hash alone the chain keeps, so it can no longer be compared."),
					}},
					"broken": map[string]any{"type": "object", "description": "The first record at which the chain does not hold.", "properties": map[string]any{
						"sequence": integer("The record's place in the chain."),
						"key":      str("The record's key, when it is still there."),
						"uid":      str("The record's uid, when it is still there."),
						"problem":  str("What does not hold."),
					}},
				},
			},
		},
		"x-kubernetes-group-version-kind": gvk("ArchiveChain"),
	}
	// kubectl explain finds a resource's kind through its paths' operations.
	operation := func(action, kind string) map[string]any {
		return map[string]any{"get": map[string]any{
			"operationId":                     action + kind,
			"x-kubernetes-action":             action,
			"x-kubernetes-group-version-kind": gvk(kind)[0],
			"responses": map[string]any{"200": map[string]any{"description": "OK", "content": map[string]any{
				"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/" + schemaName(kind)}},
			}}},
		}}
	}
	resources := versionPath + "/namespaces/{namespace}/" + archivev1alpha1.Resource
	chains := versionPath + "/namespaces/{namespace}/" + archivev1alpha1.ChainResource
	return json.Marshal(map[string]any{
		"openapi": "3.0.0",
		"info":    map[string]string{"title": "toolledger archive", "version": archivev1alpha1.GroupVersion.Version},
		"paths": map[string]any{
			resources + "/{name}": operation("get", "ArchivedToolAction"),
			resources:             operation("list", "ArchivedToolActionList"),
			versionPath + "/" + archivev1alpha1.Resource: operation("list", "ArchivedToolActionList"),
			chains + "/{name}":                           operation("get", "ArchiveChain"),
			chains:                                       operation("list", "ArchiveChainList"),
			versionPath + "/" + archivev1alpha1.ChainResource: operation("list", "ArchiveChainList"),
		},
		"components": map[string]any{"schemas": map[string]any{
			schemaName("ArchivedToolAction"):     record,
			schemaName("ArchivedToolActionList"): list("ArchivedToolAction", "ArchivedToolActionList is a page of archived records.", "The list's metadata: continue names the next page."),
			schemaName("ArchiveChain"):           chain,
			schemaName("ArchiveChainList"):       list("ArchiveChain", "ArchiveChainList is the verifications of several namespaces.", "The list's metadata."),
		}},
	})
}

// schemaName is a kind's schema name, in the API server's reversed-group form.
func schemaName(kind string) string { return "dev.toolledger.archive.v1alpha1." + kind }
