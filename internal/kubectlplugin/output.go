package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/printable"
)

// output is the value of -o/--output: human text when empty.
type output string

const (
	outputText output = ""
	outputJSON output = "json"
	outputYAML output = "yaml"
)

// String implements pflag.Value.
func (o *output) String() string { return string(*o) }

// Set implements pflag.Value, so that a wrong format fails while the flags
// are parsed, before anything is read or written.
func (o *output) Set(value string) error {
	switch v := output(value); v {
	case outputJSON, outputYAML:
		*o = v
		return nil
	default:
		return fmt.Errorf("output format must be json or yaml, not %q", value)
	}
}

// Type implements pflag.Value.
func (o *output) Type() string { return "format" }

func addOutputFlag(cmd *cobra.Command, o *output, what string) {
	cmd.Flags().VarP(o, "output", "o", "Output format: json or yaml ("+what+"); human-readable text when omitted.")
}

// printList prints a list command's result: v as format asks, or as text
// the table write draws, or, when there is nothing to draw, the sentence
// none on standard error.
func (c *commandEnv) printList(format output, v any, empty bool, none string, write func(io.Writer) error) error {
	if format != outputText {
		return printStructured(c.streams.Out, format, v)
	}
	if empty {
		fmt.Fprintln(c.streams.ErrOut, none)
		return nil
	}
	return write(c.streams.Out)
}

// writeTable writes a table as kubectl does: the columns, led by NAMESPACE
// when withNamespace, then n rows; row(i) gives the i-th row's namespace and
// its other cells. Every cell is escaped: a row's text may come from the
// archive's database, which the API server does not validate. what names
// the table in an error.
func writeTable(w io.Writer, what string, columns []string, withNamespace bool, n int, row func(i int) (namespace string, cells []string)) error {
	tw := printers.GetNewTabWriter(w)
	if withNamespace {
		columns = append([]string{"NAMESPACE"}, columns...)
	}
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	for i := range n {
		namespace, cells := row(i)
		if withNamespace {
			cells = append([]string{namespace}, cells...)
		}
		escaped := make([]string, len(cells))
		for j, c := range cells {
			escaped[j] = printable.Escape(c)
		}
		fmt.Fprintln(tw, strings.Join(escaped, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("cannot write the %s: %w", what, err)
	}
	return nil
}

// fieldWriter returns a writer of "Label:<tab>value" lines, the value
// escaped: a record's text may come from a downstream, from the caller
// (principals) or from the archive's database.
func fieldWriter(w io.Writer) func(label, value string) {
	return func(label, value string) {
		fmt.Fprintf(w, "%s:\t%s\n", label, printable.Escape(value))
	}
}

// printStructured writes v as indented JSON, as kubectl does, or as YAML.
func printStructured(w io.Writer, format output, v any) error {
	var (
		data []byte
		err  error
	)
	switch format {
	case outputJSON:
		data, err = json.MarshalIndent(v, "", "    ")
		data = append(data, '\n')
	case outputYAML:
		data, err = yaml.Marshal(v)
	default:
		return fmt.Errorf("output format %q is not a structured format", format)
	}
	if err != nil {
		return fmt.Errorf("cannot encode the output as %s: %w", format, err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("cannot write the output: %w", err)
	}
	return nil
}

// forOutput is an object as -o json|yaml prints it: with its kind, which
// the decoder leaves empty, and without managedFields, as kubectl prints
// objects by default.
func forOutput[T interface {
	runtime.Object
	SetManagedFields([]metav1.ManagedFieldsEntry)
}](object T, kind string) T {
	out := object.DeepCopyObject().(T)
	out.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind))
	out.SetManagedFields(nil)
	return out
}

// timestamp formats a time as RFC 3339 in UTC, the form the API stores.
func timestamp(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return t.UTC().Format(time.RFC3339)
}

// age is how long ago t was, as kubectl prints ages.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// relative says how far t is from now, in either direction.
func relative(now time.Time, t metav1.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + duration.HumanDuration(d)
	}
	return duration.HumanDuration(now.Sub(t.Time)) + " ago"
}

// cell makes a value fit one cell of a table: no line breaks or tabs, which
// would break the columns, and "<none>" rather than nothing.
func cell(s string) string {
	s = printable.Escape(strings.Join(strings.Fields(s), " "))
	if s == "" {
		return "<none>"
	}
	return s
}

// shorten keeps tables readable; -o json|yaml carries the full text.
func shorten(s string, limit int) string {
	runes := []rune(s)
	if len(runes) <= limit {
		return s
	}
	return string(runes[:limit-1]) + "…"
}
