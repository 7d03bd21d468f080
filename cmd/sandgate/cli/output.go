package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// The formats of a list or a query's -o flag.
const (
	formatTable = "table"
	formatJSON  = "json"
)

// outputFormat is the -o (--output) flag every list and query takes:
// table, for people (the default), or json, the API's answer as it is,
// for programs. A value it does not know is a usage error naming both.
type outputFormat struct {
	value string
	// hint is added to the error for a value that is neither, when the
	// flag meant something else before.
	hint string
}

func (o *outputFormat) String() string { return o.value }
func (o *outputFormat) Type() string   { return "table|json" }

// Set accepts table or json.
func (o *outputFormat) Set(v string) error {
	if v != formatTable && v != formatJSON {
		return fmt.Errorf("%q is not an output format: give table or json%s", v, o.hint)
	}
	o.value = v
	return nil
}

// JSON reports whether the command prints JSON.
func (o *outputFormat) JSON() bool { return o.value == formatJSON }

// bindOutput adds -o/--output to cmd, and --json, the older spelling of
// -o json, hidden.
func bindOutput(cmd *cobra.Command) *outputFormat {
	o := &outputFormat{value: formatTable}
	f := cmd.Flags()
	f.VarP(o, "output", "o", "output format: table (for people) or json (the API's answer, for programs)")
	f.Var(jsonAlias{o}, "json", "the same as -o json")
	f.Lookup("json").NoOptDefVal = "true"
	_ = f.MarkHidden("json")
	return o
}

// jsonAlias is --json: -o json.
type jsonAlias struct{ o *outputFormat }

func (j jsonAlias) String() string { return fmt.Sprint(j.o.value == formatJSON) }
func (j jsonAlias) Type() string   { return "bool" }

// Set turns --json (or --json=true) into -o json.
func (j jsonAlias) Set(v string) error {
	switch v {
	case "true":
		j.o.value = formatJSON
	case "false":
		j.o.value = formatTable
	default:
		return fmt.Errorf("%q is not a boolean", v)
	}
	return nil
}
