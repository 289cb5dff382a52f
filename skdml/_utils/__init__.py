"""Private helpers shared across skdml: the thread and CPU memory policies, torch utilities,
and the file helpers of every writer (``_files``)."""

from ._files import atomic_write_bytes, check_output_file
from ._labels import (check_label_input, check_orderable_labels, flatten_label_column,
                      integer_ids, is_missing_label, keep_label_types, plain_labels)
from ._memory import keep_freed_buffers
from ._sampling import evenly_spaced
from ._threads import (ENV_OVERRIDE, SMALL_STEP_FLOPS, _THREAD_VARS, choose_n_threads,
                       only_thread, thread_budget, thread_limits)
from ._torch import (as_float_tensor, cuda_syncs, resolve_device, torch_fit_modes,
                     torch_rng_scope, torch_seed)
from ._transactional import transactional_fit
from ._warnings import quiet_warnings, validate_fitted_data, warn_user

__all__ = ["ENV_OVERRIDE", "SMALL_STEP_FLOPS", "_THREAD_VARS", "as_float_tensor",
           "atomic_write_bytes", "check_label_input", "check_orderable_labels",
           "check_output_file", "choose_n_threads", "cuda_syncs", "evenly_spaced",
           "flatten_label_column", "integer_ids",
           "is_missing_label", "keep_freed_buffers", "keep_label_types", "only_thread",
           "plain_labels",
           "quiet_warnings",
           "resolve_device", "thread_budget", "thread_limits", "torch_fit_modes",
           "torch_rng_scope", "torch_seed", "transactional_fit", "validate_fitted_data",
           "warn_user"]
