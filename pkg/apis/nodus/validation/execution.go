package validation

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

const (
	maxExecutionGPUs = 64
	// MaxExecutionRuntime is the longest maximum runtime an execution may
	// ask for, in seconds (7 days); a host refuses a longer one too.
	MaxExecutionRuntime    = 7 * 24 * 3600
	maxCommandArgs         = 256
	maxCommandBytes        = 64 << 10
	maxExecutionEnvEntries = 128
	maxExecutionEnvBytes   = 64 << 10
	// MaxExecutionBytes bounds a submitted Execution as stored (JSON): with
	// the per-project count, what a borrower can make the server keep.
	MaxExecutionBytes = 160 << 10
	// maxExecutionMetadataBytes bounds its labels and annotations together.
	maxExecutionMetadataBytes = 16 << 10
)

var (
	imageNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	imageTagPattern  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
)

// ParseImage splits an image reference, NAME or NAME:TAG (tag "latest" by
// default), and checks both parts: a name is a file name in the host's
// images directory, never a path.
func ParseImage(ref string) (name, tag string, err error) {
	name, tag, found := strings.Cut(ref, ":")
	if !found {
		tag = "latest"
	}
	if !imageNamePattern.MatchString(name) || !imageTagPattern.MatchString(tag) || name == "." || name == ".." {
		return "", "", fmt.Errorf("image %q is not NAME[:TAG] (lower-case letters, digits, '.', '_', '-')", ref)
	}
	return name, tag, nil
}

// ValidateExecution checks a borrower's execution.
func ValidateExecution(e *nodusv1.Execution) field.ErrorList {
	errs := append(validateExecution(e), noNewFinalizers(e.Finalizers, nil)...)
	return append(errs, noNULs(e)...)
}

// noNULs refuses a NUL byte in an argument or an environment value: the
// host's execve takes C strings, so such an execution could only fail
// there (StartFailed) after it was placed. Checked at creation: spec never
// changes after it.
func noNULs(e *nodusv1.Execution) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for i, a := range e.Spec.Command {
		if strings.IndexByte(a, 0) >= 0 {
			errs = append(errs, field.Invalid(spec.Child("command").Index(i), field.OmitValueType{}, "must not contain a NUL byte"))
		}
	}
	for i, v := range e.Spec.Env {
		if strings.IndexByte(v.Value, 0) >= 0 {
			// The value may be the borrower's secret, as an argument may
			// be: the error, which the audit log keeps, repeats neither.
			errs = append(errs, field.Invalid(spec.Child("env").Index(i).Child("value"), field.OmitValueType{}, "must not contain a NUL byte"))
		}
	}
	return errs
}

func validateExecution(e *nodusv1.Execution) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&e.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	errs = append(errs, validateReferenceName(e.Spec.Pool, spec.Child("pool"), true)...)
	switch n := len(e.Spec.Command); {
	case n == 0 || e.Spec.Command[0] == "":
		errs = append(errs, field.Required(spec.Child("command"), "the program to run and its arguments"))
	case n > maxCommandArgs:
		errs = append(errs, field.TooMany(spec.Child("command"), n, maxCommandArgs))
	}
	total := 0
	for _, a := range e.Spec.Command {
		total += len(a)
	}
	if total > maxCommandBytes {
		errs = append(errs, field.TooLong(spec.Child("command"), "", maxCommandBytes))
	}
	if len(e.Spec.Env) > maxExecutionEnvEntries {
		errs = append(errs, field.TooMany(spec.Child("env"), len(e.Spec.Env), maxExecutionEnvEntries))
	}
	envBytes := 0
	for _, v := range e.Spec.Env {
		envBytes += len(v.Name) + len(v.Value)
	}
	if envBytes > maxExecutionEnvBytes {
		errs = append(errs, field.TooLong(spec.Child("env"), "", maxExecutionEnvBytes))
	}
	metaBytes := 0
	for _, m := range []map[string]string{e.Labels, e.Annotations} {
		for k, v := range m {
			metaBytes += len(k) + len(v)
		}
	}
	if metaBytes > maxExecutionMetadataBytes {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "annotations"), "", maxExecutionMetadataBytes))
	}
	if data, err := json.Marshal(e); err == nil && len(data) > MaxExecutionBytes {
		errs = append(errs, field.TooLong(field.NewPath("spec"), "", MaxExecutionBytes))
	}
	seen := sets.New[string]()
	for i, v := range e.Spec.Env {
		p := spec.Child("env").Index(i).Child("name")
		for _, msg := range utilvalidation.IsEnvVarName(v.Name) {
			errs = append(errs, field.Invalid(p, v.Name, msg))
		}
		if seen.Has(v.Name) {
			errs = append(errs, field.Duplicate(p, v.Name))
		}
		seen.Insert(v.Name)
	}
	if e.Spec.GPUs < 0 || e.Spec.GPUs > maxExecutionGPUs {
		errs = append(errs, field.Invalid(spec.Child("gpus"), e.Spec.GPUs, fmt.Sprintf("must be between 0 and %d", maxExecutionGPUs)))
	}
	if e.Spec.Image != "" {
		if _, _, err := ParseImage(e.Spec.Image); err != nil {
			errs = append(errs, field.Invalid(spec.Child("image"), e.Spec.Image, err.Error()))
		}
	}
	if e.Spec.MaxRuntimeSeconds < 1 || e.Spec.MaxRuntimeSeconds > MaxExecutionRuntime {
		errs = append(errs, field.Invalid(spec.Child("maxRuntimeSeconds"), e.Spec.MaxRuntimeSeconds, fmt.Sprintf("must be between 1 and %d (7 days)", MaxExecutionRuntime)))
	}
	return errs
}

// ValidateExecutionUpdate keeps what runs fixed once submitted.
func ValidateExecutionUpdate(e, old *nodusv1.Execution) field.ErrorList {
	errs := validateExecution(e)
	errs = append(errs, noNewFinalizers(e.Finalizers, old.Finalizers)...)
	if !apiequality.Semantic.DeepEqual(e.Spec, old.Spec) {
		// Not ValidateImmutableField's error: it repeats the whole new spec,
		// environment values (a borrower's secrets) included, into the
		// answer and the audit log.
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "an execution's spec is immutable once submitted"))
	}
	return errs
}

// noNewFinalizers refuses finalizers a write adds to an Execution: nothing
// of Nodus' removes one, so the execution, and its project's deletion,
// would wait for ever. Removing one is fine.
func noNewFinalizers(finalizers, old []string) field.ErrorList {
	var errs field.ErrorList
	for i, f := range finalizers {
		if !slices.Contains(old, f) {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "finalizers").Index(i),
				"an execution takes no finalizers: nothing would remove it, and the execution and its project's deletion would wait for ever"))
		}
	}
	return errs
}
