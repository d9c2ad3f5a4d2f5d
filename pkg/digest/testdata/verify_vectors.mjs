// Checks vectors.json against an implementation of RFC 8785 that shares no
// code with the Go one: ECMAScript's own JSON.parse and JSON.stringify, whose
// number and string spelling RFC 8785 adopts, and Array.prototype.sort, which
// orders member names by UTF-16 code units as RFC 8785 section 3.2.3 asks.
//
//	node pkg/digest/testdata/verify_vectors.mjs
//
// It checks only the accepted vectors. JSON.parse keeps duplicate names (the
// last wins), lone surrogates and integers beyond 2^53, which the digest
// refuses, so the "rejected" list is left to the Go test.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

function canonicalize(value) {
  if (value === null || typeof value !== "object") {
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    return "[" + value.map(canonicalize).join(",") + "]";
  }
  return "{" + Object.keys(value).sort()
    .map((name) => JSON.stringify(name) + ":" + canonicalize(value[name]))
    .join(",") + "}";
}

const file = new URL("vectors.json", import.meta.url);
const { vectors } = JSON.parse(readFileSync(file, "utf8"));
let failures = 0;
for (const v of vectors) {
  const r = v.request;
  const params = JSON.parse(r.parameters === "" ? "{}" : r.parameters);
  const envelope = { tenant: r.tenant, tool: r.tool, operation: r.operation, version: r.version, parameters: params };
  const canonical = canonicalize(envelope);
  const digest = "sha256:" + createHash("sha256").update(canonical, "utf8").digest("hex");
  const problems = [];
  if (canonicalize(params) !== v.canonicalParameters) problems.push(`canonicalParameters: got ${JSON.stringify(canonicalize(params))}`);
  if (canonical !== v.canonical) problems.push(`canonical: got ${JSON.stringify(canonical)}`);
  if (digest !== v.digest) problems.push(`digest: got ${digest}`);
  if (problems.length > 0) {
    failures++;
    console.log(`FAIL ${v.name}\n  ${problems.join("\n  ")}`);
  }
}
console.log(`${vectors.length - failures}/${vectors.length} vectors agree`);
process.exit(failures === 0 ? 0 : 1);
