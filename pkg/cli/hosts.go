package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli/sshentry"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// HostsOptions are `nodus hosts list|get`'s.
type HostsOptions struct {
	*Globals
	Streams
	Project     string
	AllProjects bool
	Watch       bool
	Now         func() time.Time
}

func newHostsCommand(g *Globals, s Streams) *cobra.Command {
	o := &HostsOptions{Globals: g, Streams: s, Now: time.Now}
	cmd := &cobra.Command{Use: "hosts", Short: "Your reserved hosts"}
	list := &cobra.Command{
		Use:     "list [-n PROJECT | -A]",
		Short:   "List reserved hosts",
		Example: "  nodus hosts list -n acme\n  nodus hosts list -A -o wide",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.List(cmd.Context()) },
	}
	list.Flags().StringVarP(&o.Project, "project", "n", "", "the project")
	list.Flags().BoolVarP(&o.AllProjects, "all-projects", "A", false, "every project you can see")
	list.Flags().BoolVarP(&o.Watch, "watch", "w", false, "keep printing changes")
	get := &cobra.Command{
		Use:               "get PROJECT/NAME",
		Short:             "Show one reserved host",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeHosts(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.Get(cmd.Context(), args[0]) },
	}
	cmd.AddCommand(list, get)
	return cmd
}

// List prints the hosts of a project (or all).
func (o *HostsOptions) List(ctx context.Context) error {
	if o.Project == "" && !o.AllProjects {
		return usageError(fmt.Errorf("say which project (-n PROJECT) or all of them (-A)"))
	}
	c, _, err := o.Client()
	if err != nil {
		return err
	}
	hosts := c.NodusV1().ReservedHosts(o.Project)
	list, err := hosts.List(ctx, metav1.ListOptions{})
	if o.AllProjects && apierrors.IsForbidden(err) {
		// Every project at once is for operators; a customer's -A is each
		// of the projects they belong to, one after the other.
		if o.Watch {
			return usageError(errors.New("--watch follows one project (-n PROJECT), or every project for operators"))
		}
		all, err := yourHosts(ctx, c)
		if err != nil {
			return err
		}
		return o.print(all)
	}
	if err != nil {
		return err
	}
	if err := o.print(list.Items); err != nil || !o.Watch {
		return err
	}
	// The server ends a watch now and then (its timeout): watch on from the
	// last version seen. It ends it for good when access ends (a token
	// revoked or expired, a membership removed): then the next watch is
	// refused, and that refusal is the command's error, never a silent end.
	rv := list.ResourceVersion
	for {
		w, err := hosts.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for e := range w.ResultChan() {
			if e.Type == watch.Error {
				w.Stop()
				if st, ok := e.Object.(*metav1.Status); ok {
					return watchError(st)
				}
				// Not the server's error as it sends one: its text (every
				// string of the object) is not printed.
				return refuse(reasonAnswerRefused, fmt.Errorf("the server's watch of hosts ended with an error event that is no Status (%T)", e.Object))
			}
			h, ok := e.Object.(*nodusv1.ReservedHost)
			if !ok {
				continue
			}
			rv = h.ResourceVersion
			if e.Type == watch.Bookmark {
				continue
			}
			if err := o.print([]nodusv1.ReservedHost{*h}); err != nil {
				w.Stop()
				return err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// Get prints one host.
func (o *HostsOptions) Get(ctx context.Context, ref string) error {
	_, h, err := o.host(ctx, ref)
	if err != nil {
		return err
	}
	return o.print([]nodusv1.ReservedHost{*h})
}

func (o *HostsOptions) print(hosts []nodusv1.ReservedHost) error {
	objects := make([]interface{}, len(hosts))
	for i := range hosts {
		hosts[i].APIVersion, hosts[i].Kind = nodusv1.SchemeGroupVersion.String(), "ReservedHost"
		objects[i] = &hosts[i]
	}
	if done, err := structured(o.Output, o.Out, objects...); done {
		return err
	}
	w := tabwriter.NewWriter(o.Out, 0, 0, 3, ' ', 0)
	header := "HOST\tSTATE\tEPOCH\tGPUS\tPOOL\tCONNECTED\tENDS IN"
	if o.Output == "wide" {
		header += "\tLOGIN\tSSH"
	}
	fmt.Fprintln(w, header)
	for _, h := range hosts {
		r := h.Status.Reservation
		row := []any{h.Namespace + "/" + h.Name, r.State, r.Epoch,
			nodusv1.GPUSummary(h.Status.Inventory.GPUs), dash(h.Status.Pool), connected(&h), o.endsIn(r.EndsAt)}
		if o.Output == "wide" {
			// The command is the CLI's own, as the alias is: users copy it
			// into a shell, and the server's could be anything.
			ssh := "-"
			if h.Status.Connect != nil {
				ssh = "nodus ssh " + h.Namespace + "/" + h.Name
			}
			row = append(row, r.LoginUser, ssh)
		}
		writeRow(w, row...)
	}
	return w.Flush()
}

func (o *HostsOptions) endsIn(t metav1.Time) string {
	d := t.Sub(o.Now())
	if d <= 0 {
		return "ended"
	}
	return duration.HumanDuration(d)
}

func connected(h *nodusv1.ReservedHost) string {
	if c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected); c != nil {
		if c.Status == metav1.ConditionTrue {
			return "yes"
		}
		return "no (" + c.Reason + ")"
	}
	return "unknown"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// splitRef splits PROJECT/NAME.
func splitRef(ref string) (string, string, error) {
	project, name, ok := strings.Cut(ref, "/")
	if !ok || project == "" || name == "" || strings.Contains(name, "/") {
		return "", "", usageError(fmt.Errorf("%q is not PROJECT/NAME", ref))
	}
	return project, name, nil
}

// completeHosts completes PROJECT/NAME from the hosts the caller can see.
func completeHosts(g *Globals) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, _, err := g.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		hosts, _ := yourHosts(cmd.Context(), c)
		var out []string
		for _, h := range hosts {
			// The shell gets what is offered, and may run what a name holds
			// where it does not quote it: only names that are host names.
			if sshentry.CheckNames(h.Namespace, h.Name) != nil {
				continue
			}
			if ref := h.Namespace + "/" + h.Name; strings.HasPrefix(ref, prefix) {
				out = append(out, ref)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// yourHosts lists the hosts of every project the caller sees, one project
// after the other: the server lists a caller only the namespaces of its
// projects. A project that refuses (a membership just removed) or is gone
// is skipped; any other failure fails the list, which would be incomplete.
//
// All of it is held at once, so its answers share the bound of one.
func yourHosts(ctx context.Context, c versioned.Interface) ([]nodusv1.ReservedHost, error) {
	ctx = withOneAnswersBound(ctx)
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/api/v1/namespaces").Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var namespaces struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &namespaces); err != nil {
		return nil, err
	}
	var out []nodusv1.ReservedHost
	for _, ns := range namespaces.Items {
		// A project's name goes into the next request's path and into
		// what is printed: a project is named as a namespace is.
		if errs := validation.IsDNS1123Label(ns.Metadata.Name); len(errs) > 0 {
			return nil, refuse(reasonAnswerRefused, fmt.Errorf("the server lists a project named %s, which is no project's name (%s)",
				oneLine(strconv.Quote(ns.Metadata.Name)), strings.Join(errs, "; ")))
		}
		hosts, err := c.NodusV1().ReservedHosts(ns.Metadata.Name).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing the hosts of project %s: %w", ns.Metadata.Name, err)
		}
		out = append(out, hosts.Items...)
	}
	return out, nil
}

// structured prints objects (typed API objects, their kind set) as -o json
// or yaml asks, one after the other, and says whether it did. Any other -o
// but wide is a usage error.
func structured(output string, w io.Writer, objects ...interface{}) (bool, error) {
	switch output {
	case "json", "yaml":
	case "", "wide":
		return false, nil
	default:
		return true, usageError(fmt.Errorf("-o %s: use wide, json or yaml", output))
	}
	for _, obj := range objects {
		data, err := json.Marshal(obj)
		if err != nil {
			return true, err
		}
		if data, err = printableAs(output, data); err != nil {
			return true, err
		}
		fmt.Fprintln(w, strings.TrimSpace(string(data)))
	}
	return true, nil
}
