package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/failover"
)

// operatorCommands are the fleet verbs: projects, pools, nodes,
// allocations, reservations and access tokens.
func operatorCommands(g *Globals, s Streams) []*cobra.Command {
	return []*cobra.Command{projectsCommand(g, s), poolsCommand(g, s), nodesCommand(g, s),
		allocationsCommand(g, s), reservationsCommand(g, s), tokensCommand(g, s)}
}

// table prints what the server's table convertor says about resource
// (all of them, or one), as kubectl get does.
func table(ctx context.Context, g *Globals, s Streams, resource, name string) error {
	c, _, err := g.Client()
	if err != nil {
		return err
	}
	req := c.NodusV1().RESTClient().Get().Resource(resource)
	if name != "" {
		req = req.Name(name)
	}
	switch g.Output {
	case "json", "yaml":
		// The objects themselves, status and all, as kubectl get -o shows them.
		raw, err := req.SetHeader("Accept", "application/json").Do(ctx).Raw()
		if err != nil {
			return err
		}
		if raw, err = printableAs(g.Output, raw); err != nil {
			return err
		}
		fmt.Fprintln(s.Out, strings.TrimSpace(string(raw)))
		return nil
	case "", "wide":
	default:
		return usageError(fmt.Errorf("-o %s: use wide, json or yaml", g.Output))
	}
	raw, err := req.SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io, application/json").Do(ctx).Raw()
	if err != nil {
		return err
	}
	var t metav1.Table
	if err := json.Unmarshal(raw, &t); err != nil {
		return err
	}
	w := tabwriter.NewWriter(s.Out, 0, 0, 3, ' ', 0)
	var header []any
	for _, col := range t.ColumnDefinitions {
		header = append(header, strings.ToUpper(col.Name))
	}
	writeRow(w, header...)
	for _, row := range t.Rows {
		writeRow(w, row.Cells...)
	}
	return w.Flush()
}

func listGet(g *Globals, s Streams, resource string) []*cobra.Command {
	return []*cobra.Command{
		{Use: "list", Short: "List " + resource, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error { return table(cmd.Context(), g, s, resource, "") }},
		{Use: "get NAME", Short: "Show one of the " + resource, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return table(cmd.Context(), g, s, resource, args[0]) }},
	}
}

func projectsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "projects", Short: "Customer projects (operators)"}
	var members []string
	create := &cobra.Command{
		Use: "create NAME [--member USER:ROLE]...", Short: "Create a project", Args: cobra.ExactArgs(1),
		Example: "  nodus projects create acme --member alice:admin --member bob:viewer",
		RunE: func(cmd *cobra.Command, args []string) error {
			p := &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: args[0]}}
			for _, m := range members {
				member, err := parseMember(m, false)
				if err != nil {
					return err
				}
				p.Spec.Members = append(p.Spec.Members, member)
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			if _, err := c.NodusV1().Projects().Create(cmd.Context(), p, metav1.CreateOptions{}); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "project %s created\n", args[0])
			return nil
		},
	}
	create.Flags().StringArrayVar(&members, "member", nil, "USER:ROLE (admin, member or viewer)")
	var group bool
	add := &cobra.Command{
		Use: "add-member PROJECT NAME:ROLE", Short: "Give a user (or --group) a role in a project", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			member, err := parseMember(args[1], group)
			if err != nil {
				return err
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			p, err := c.NodusV1().Projects().Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.Members = withMember(p.Spec.Members, member)
			if _, err := c.NodusV1().Projects().Update(cmd.Context(), p, metav1.UpdateOptions{}); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "%s %s is now %s of project %s\n", strings.ToLower(string(member.Kind)), member.Name, member.Role, args[0])
			return nil
		},
	}
	add.Flags().BoolVar(&group, "group", false, "NAME is a group")
	var retire bool
	del := &cobra.Command{
		Use:   "delete NAME [--retire-reservations]",
		Short: "Delete a project and everything in it",
		Long: "Deletes the project with its ReservedHosts, Executions, HostLendings, logs and idempotency records; " +
			"a project created later under the same name inherits nothing. A project with live reservations is " +
			"refused unless --retire-reservations: then each is retired as a deleted reservation is (access ends, " +
			"the node is cleaned).",
		Example: "  nodus projects delete acme --retire-reservations",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			marked := false
			if retire {
				p, err := c.NodusV1().Projects().Get(cmd.Context(), args[0], metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Annotations[nodusv1.AnnotationRetireReservations] != "true" {
					patch := []byte(`{"metadata":{"annotations":{"` + nodusv1.AnnotationRetireReservations + `":"true"}}}`)
					if _, err := c.NodusV1().Projects().Patch(cmd.Context(), args[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
						return err
					}
					marked = true
				}
			}
			if err := c.NodusV1().Projects().Delete(cmd.Context(), args[0], metav1.DeleteOptions{}); err != nil {
				if marked && !apierrors.IsNotFound(err) {
					// Left on a project not deleted, the mark would let a
					// later plain delete retire its reservations unasked.
					unmark := []byte(`{"metadata":{"annotations":{"` + nodusv1.AnnotationRetireReservations + `":null}}}`)
					if _, uerr := c.NodusV1().Projects().Patch(context.WithoutCancel(cmd.Context()), args[0], types.MergePatchType, unmark, metav1.PatchOptions{}); uerr != nil {
						return fmt.Errorf("%w; the project keeps its %s annotation, which lets any later delete retire its reservations: remove it (kubectl annotate project %s %s-)",
							err, nodusv1.AnnotationRetireReservations, args[0], nodusv1.AnnotationRetireReservations)
					}
				}
				return err
			}
			fmt.Fprintf(s.Out, "project %s is being deleted; it is gone once everything in it is\n", args[0])
			return nil
		},
	}
	del.Flags().BoolVar(&retire, "retire-reservations", false, "retire the project's live reservations (their access ends for good)")
	cmd.AddCommand(append(listGet(g, s, "projects"), create, add, del)...)
	return cmd
}

// withMember adds member to members, or, for someone already a member,
// gives them member's role rather than a second entry (which validation
// refuses).
func withMember(members []nodusv1.ProjectMember, member nodusv1.ProjectMember) []nodusv1.ProjectMember {
	kind := func(m nodusv1.ProjectMember) nodusv1.MemberKind { return cmp.Or(m.Kind, nodusv1.MemberKindUser) }
	if i := slices.IndexFunc(members, func(m nodusv1.ProjectMember) bool { return kind(m) == kind(member) && m.Name == member.Name }); i >= 0 {
		members[i].Role = member.Role
		return members
	}
	return append(members, member)
}

func parseMember(s string, group bool) (nodusv1.ProjectMember, error) {
	name, role, ok := strings.Cut(s, ":")
	if !ok || name == "" {
		return nodusv1.ProjectMember{}, usageError(fmt.Errorf("%q is not NAME:ROLE", s))
	}
	kind := nodusv1.MemberKindUser
	if group {
		kind = nodusv1.MemberKindGroup
	}
	return nodusv1.ProjectMember{Kind: kind, Name: name, Role: nodusv1.ProjectRole(role)}, nil
}

func poolsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "pools", Short: "Capacity pools (operators)"}
	var supplier, location, class, loginUser string
	var traits []string
	create := &cobra.Command{
		Use: "create NAME", Short: "Create a pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			_, err = c.NodusV1().Pools().Create(cmd.Context(), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: args[0]},
				Spec: nodusv1.PoolSpec{Supplier: supplier, Location: location}}, metav1.CreateOptions{})
			if err == nil {
				fmt.Fprintf(s.Out, "pool %s created\n", args[0])
			}
			return err
		},
	}
	create.Flags().StringVar(&supplier, "supplier", "", "who owns the machines")
	create.Flags().StringVar(&location, "location", "", "where the machines are")
	var nodeName string
	token := &cobra.Command{
		Use:   "token POOL (--resource-class CLASS | --node NAME)",
		Short: "Issue a single-use enrollment token for a server of the pool",
		Long: "Issue a single-use enrollment token for a server of the pool. With --node the token enrolls only that node:\n" +
			"a new one, or an existing node of the pool again (a reinstalled server); without it, only a name no node has yet.\n" +
			"Enrollment never changes an existing node's pool, class or traits.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			server, err := g.pastableServers()
			if err != nil {
				return err
			}
			spec := nodusv1.EnrollmentTokenSpec{Pool: args[0], NodeName: nodeName, ResourceClass: class, Traits: traits, LoginUser: loginUser}
			if nodeName != "" && class == "" {
				// Re-enrolling keeps the node's spec; the token only has to be valid.
				n, err := c.NodusV1().Nodes().Get(cmd.Context(), nodeName, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("--resource-class is needed for a new node (and --traits, --login-user): %w", err)
				}
				if err != nil {
					return fmt.Errorf("reading node %s to keep its class: %w", nodeName, err)
				}
				spec.ResourceClass, spec.Traits, spec.LoginUser = n.Spec.ResourceClass, n.Spec.Traits, n.Spec.LoginUser
			}
			prefix := args[0] + "-"
			if nodeName != "" && len(nodeName) < 40 {
				prefix = nodeName + "-"
			}
			t, err := c.NodusV1().EnrollmentTokens().Create(cmd.Context(), &nodusv1.EnrollmentToken{
				ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}, Spec: spec,
			}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			// The command is run as root on a host: nothing of the
			// server's answer goes into it unchecked.
			if !enrollmentTokenShape.MatchString(t.Status.Token) || !caHashShape.MatchString(t.Status.CAFingerprint) {
				// Made, but never shown: it must not stay usable.
				revoked := "it was deleted"
				if !strings.HasPrefix(t.Name, prefix) {
					revoked = fmt.Sprintf("the answer names token %s, which nodus did not ask for: delete the one it made", oneLine(strconv.Quote(t.Name)))
				} else if err := c.NodusV1().EnrollmentTokens().Delete(cmd.Context(), t.Name, metav1.DeleteOptions{}); err != nil {
					revoked = fmt.Sprintf("deleting it failed (%s): delete enrollment token %s", oneLine(err), t.Name)
				}
				return refuse(reasonAnswerRefused, fmt.Errorf("refusing the server's answer: its token %s or CA hash %s is not of the form a nodus-server gives; %s",
					oneLine(strconv.Quote(t.Status.Token)), oneLine(strconv.Quote(t.Status.CAFingerprint)), revoked))
			}
			name := "" // nodusd enroll defaults to the host name
			if nodeName != "" {
				name = " --name " + nodeName
			}
			// The token goes to nodusd on stdin: on its command line every
			// account of the host would read it (ps), and the shell's history keep it.
			expires := "never: it stays valid until deleted"
			if t.Spec.ExpiresAt != nil {
				expires = t.Spec.ExpiresAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(s.Out, "enrollment token (shown once, expires %s):\n  %s\n"+
				"run on the host, as root, and paste the token on the line it reads (not on the command line, where ps and the shell's history show it):\n"+
				"  nodusd enroll --server %s --token - --ca-hash %s%s\n",
				expires, t.Status.Token, server, t.Status.CAFingerprint, name)
			return nil
		},
	}
	token.Flags().StringVar(&nodeName, "node", "", "the one node the token enrolls (required to enroll an existing node again)")
	token.Flags().StringVar(&class, "resource-class", "", "resource class of the node")
	token.Flags().StringSliceVar(&traits, "traits", nil, "traits of the node")
	token.Flags().StringVar(&loginUser, "login-user", "", "default login user of the node")
	cmd.AddCommand(append(listGet(g, s, "pools"), create, token)...)
	return cmd
}

func nodesCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "nodes", Short: "Physical servers (operators)"}
	var reason string
	maintenance := &cobra.Command{
		Use: "maintenance NAME on|off [--reason TEXT]", Short: "Take a node out of scheduling, or back", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			on := args[1] == "on"
			if !on && args[1] != "off" {
				return usageError(fmt.Errorf("say on or off, not %q", args[1]))
			}
			if !on {
				reason = ""
			}
			patch, _ := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"maintenance": on, "maintenanceReason": reason}})
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			if _, err := c.NodusV1().Nodes().Patch(cmd.Context(), args[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "node %s maintenance %s\n", args[0], args[1])
			return nil
		},
	}
	maintenance.Flags().StringVar(&reason, "reason", "", "why")
	clean := &cobra.Command{
		Use:   "clean NAME",
		Short: "Ask the node's agent to clean it again (after a failed handover cleaning)",
		Long: "Asks for a new handover cleaning: the node's agent ends the last tenant's processes, resets its login " +
			"accounts and runs the operator's --clean-command. The node is cleaning until the agent reports; a failed " +
			"cleaning leaves it in maintenance. A node that a reservation holds is refused.",
		Example: "  nodus nodes clean gpu-001 && nodus nodes get gpu-001 -o yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			n, err := c.NodusV1().Nodes().Clean(cmd.Context(), args[0], &nodusv1.NodeCleanRequest{}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if n.Status.Cleaning == nil {
				return refuse(reasonAnswerRefused, fmt.Errorf("unexpected answer from the server: node %s shows no cleaning request", args[0]))
			}
			fmt.Fprintf(s.Out, "node %s: cleaning request %d asked of its agent; `nodus nodes get %s -o yaml` shows status.cleaning\n",
				args[0], n.Status.Cleaning.Request, args[0])
			return nil
		},
	}
	cmd.AddCommand(append(listGet(g, s, "nodes"), maintenance, clean)...)
	return cmd
}

func allocationsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "allocations", Short: "Node allocations (operators)"}
	var spec nodusv1.AllocationSpec
	create := &cobra.Command{
		Use: "create NAME --resource-class CLASS", Short: "Claim a node", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			_, err = c.NodusV1().Allocations().Create(cmd.Context(), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: args[0]}, Spec: spec}, metav1.CreateOptions{})
			if err == nil {
				fmt.Fprintf(s.Out, "allocation %s created\n", args[0])
			}
			return err
		},
	}
	create.Flags().StringVar(&spec.ResourceClass, "resource-class", "", "resource class")
	create.Flags().StringSliceVar(&spec.Traits, "traits", nil, "required traits")
	create.Flags().StringSliceVar(&spec.CandidateNodes, "candidate", nil, "candidate nodes")
	create.Flags().StringVar(&spec.Node, "node", "", "backfill this node")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete an allocation, freeing its node", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			allocations := c.NodusV1().Allocations()
			if err := deleteSeen(cmd.Context(), args[0], allocations.Get, allocations.Delete); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "allocation %s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(append(listGet(g, s, "allocations"), create, del)...)
	return cmd
}

func reservationsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "reservations", Short: "Reservation contracts (operators)"}
	var spec nodusv1.ReservationSpec
	var starts, ends string
	create := &cobra.Command{
		Use:     "create NAME --project P (--node N | --allocation A | --resource-class C) --ends TIME",
		Short:   "Reserve a whole server to a project for a term",
		Example: "  nodus reservations create acme-1 --project acme --node gpu-001 --ends 2027-06-30T00:00:00Z --login-user ubuntu",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			if starts != "" {
				t, err := time.Parse(time.RFC3339, starts)
				if err != nil {
					return usageError(fmt.Errorf("--starts: %w", err))
				}
				start = t
			}
			end, err := time.Parse(time.RFC3339, ends)
			if err != nil {
				return usageError(fmt.Errorf("--ends must be an RFC 3339 time: %w", err))
			}
			spec.StartsAt, spec.EndsAt = metav1.NewTime(start.Truncate(time.Second)), metav1.NewTime(end)
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			_, err = c.NodusV1().Reservations().Create(cmd.Context(), &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: args[0]}, Spec: spec}, metav1.CreateOptions{})
			if err == nil {
				fmt.Fprintf(s.Out, "reservation %s created; the project sees it as %s/%s\n", args[0], spec.Project, args[0])
			}
			return err
		},
	}
	f := create.Flags()
	f.StringVar(&spec.Project, "project", "", "the customer project")
	f.StringVar(&spec.Placement.Node, "node", "", "place on this node")
	f.StringVar(&spec.Placement.Allocation, "allocation", "", "place on this allocation's node")
	f.StringVar(&spec.Placement.ResourceClass, "resource-class", "", "allocate a node of this class")
	f.StringSliceVar(&spec.Placement.Traits, "traits", nil, "with these traits")
	f.StringVar(&starts, "starts", "", "start of the term (RFC 3339; default now)")
	f.StringVar(&ends, "ends", "", "exclusive end of the term (RFC 3339)")
	f.StringVar(&spec.LoginUser, "login-user", "", "the operating-system account (default: the node's)")
	cmd.AddCommand(append(listGet(g, s, "reservations"), create)...)
	return cmd
}

// pastableServers are the context's servers as the command lines nodus
// prints for a person to paste name them (nodusd enroll --server …, run as
// root on a host; nodus login --server …): every replica the context
// knows, each one https://HOST[:PORT] and nothing more, which is all the
// shell may find there. Checked before anything is made that the line
// would hand over.
func (g *Globals) pastableServers() (string, error) {
	replicas, err := g.replicas()
	if err != nil {
		return "", err
	}
	servers, err := failover.Servers(strings.Join(replicas, ","))
	if err != nil || len(servers) != len(replicas) {
		return "", usageError(fmt.Errorf("this context's server %s is not https://HOST:PORT, and a command nodus prints to paste names nothing else: "+
			"log in again with nodus login --server https://HOST:PORT, or correct the context's server (nodus config get-contexts shows it)", oneLine(strconv.Quote(strings.Join(replicas, ",")))))
	}
	joined := strings.Join(servers, ",")
	if strings.ContainsAny(joined, "[]") {
		return "'" + joined + "'", nil // an IPv6 address's brackets are a shell pattern
	}
	return joined, nil
}

func tokensCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Access tokens for people (operators)"}
	var spec nodusv1.AccessTokenSpec
	var expires time.Duration
	create := &cobra.Command{
		Use: "create NAME --user USER", Short: "Create an access token; it is shown once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case expires < 0 || cmd.Flags().Changed("expires") && expires == 0:
				// Left out, a token lasts until revoked; a lifetime of none
				// or less is no lifetime, and must not become that.
				return usageError(fmt.Errorf("--expires %s: a token's lifetime must be positive (leave --expires out for one that lasts until revoked)", expires))
			case expires > 0:
				spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(expires).Truncate(time.Second)}
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			server, err := g.pastableServers()
			if err != nil {
				return err
			}
			t, err := c.NodusV1().AccessTokens().Create(cmd.Context(), &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: args[0]}, Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			// The command is handed to a person to run: nothing of the
			// server's answer goes into it unchecked.
			if !accessTokenShape.MatchString(t.Status.Token) {
				// Made, but never shown: it must not stay usable.
				revoked := "it was revoked"
				if err := c.NodusV1().AccessTokens().Delete(cmd.Context(), args[0], metav1.DeleteOptions{}); err != nil {
					revoked = fmt.Sprintf("revoking it failed (%s): run nodus tokens revoke %s", oneLine(err), args[0])
				}
				return refuse(reasonAnswerRefused, fmt.Errorf("refusing the server's answer: its token %s is not of the form a nodus-server gives; %s",
					oneLine(strconv.Quote(t.Status.Token)), revoked))
			}
			// The token is handed over apart from the command: on a command
			// line it would be in ps and the shell's history.
			fmt.Fprintf(s.Out, "token for %s (shown once):\n  %s\nthey log in with (it asks for the token; --token - reads it from stdin):\n  nodus login --server %s --ca-file CA.crt\n", spec.User, t.Status.Token, server)
			return nil
		},
	}
	create.Flags().StringVar(&spec.User, "user", "", "the person")
	create.Flags().StringSliceVar(&spec.Groups, "group", nil, "groups")
	create.Flags().DurationVar(&expires, "expires", 0, "lifetime (default: until revoked)")
	revoke := &cobra.Command{
		Use: "revoke NAME", Short: "Revoke a token at once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			tokens := c.NodusV1().AccessTokens()
			if err := deleteSeen(cmd.Context(), args[0], tokens.Get, tokens.Delete); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "token %s revoked\n", args[0])
			return nil
		},
	}
	listCmd := listGet(g, s, "accesstokens")
	cmd.AddCommand(listCmd[0], create, revoke)
	return cmd
}

// The forms of what a server answers for a new token: NAME.SECRET, the
// secret unpadded URL-safe base64, an enrollment token's name after
// "enroll_"; a CA's hash is sha256: and hex.
var (
	accessTokenShape     = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,252}\.[A-Za-z0-9_-]{16,128}$`)
	enrollmentTokenShape = regexp.MustCompile(`^enroll_[a-z0-9][a-z0-9.-]{0,252}\.[A-Za-z0-9_-]{16,128}$`)
	caHashShape          = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)
