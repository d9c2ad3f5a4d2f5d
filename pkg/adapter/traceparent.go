package adapter

// TraceparentHeader is the W3C Trace Context header an adapter forwards, so
// that one trace joins the agent's run, the ledger's record and the
// downstream's effect.
const TraceparentHeader = "traceparent"
