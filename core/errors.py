"""The one error hierarchy of ``autoaug``.

Every error the project raises on purpose derives from :class:`AutoaugError`; the branch says
whose fault it is and therefore how ``autoaug`` exits (the mapping lives in
:func:`autoaug.launch.cli.main`, nowhere else):

* :class:`UserInputError` -- a flag, a config file, a reference, a name the user gave: **2**
* :class:`DataError` -- a dataset that cannot be read or used: **2**
* :class:`StoreError` -- the policy store (missing policy, corrupt artifact...): **2**
* :class:`SearchError` -- a search could not produce a policy (all trials failed): **1**;
  :class:`SearchInterruptedError` -- it stopped early and can be resumed: **130**;
  :class:`RunExistsError` -- the run name is taken: **2**;
  :class:`RunFileError` -- a file of its run directory is damaged, or was written by another
  version of autoaug that this one cannot read: **2** (the message names the file, the version
  that made it when known, and what to do)
* :class:`CompareError` -- a comparison cannot run as configured: **2**;
  :class:`RunFailedError` -- one of its training runs raised: **1**
* :class:`ClusterError` -- Ray could not be reached or used: **1**;
  :class:`ClusterInputError` -- bad input about the cluster (address, job id, ...): **2**
* :class:`StorageError` -- a write failed mid-run because the filesystem is full or over quota
  (``ENOSPC``, ``EDQUOT``): **1**; :class:`StorageAccessError` -- because it is read-only or
  access is denied (``EROFS``, ``EACCES``, ``EPERM``): **2**. One line naming the path and what
  to free or fix (:func:`autoaug.core.location.writing` makes them, for every writer)
* :class:`MissingExtraError` -- the command needs the search stack (Ray, Optuna, DALI), which a
  light install (``pip install autoaug``) leaves out: **2** (the message names the extra)

The input-like branches also derive from ``ValueError`` (and the store's lookups from
``LookupError``), so code that catches the built-in types keeps working.

Problems that do not stop a command are warnings of one branch, :class:`AutoaugWarning` (a
``UserWarning``): ``autoaug``'s main prints each as one ``autoaug: warning:`` line.
:class:`DataWarning` -- the data allow what was asked only approximately (e.g. a grouped split
that cannot stratify a class).
"""

from __future__ import annotations

__all__ = [
    "AutoaugError",
    "UserInputError",
    "DataError",
    "StoreError",
    "SearchError",
    "SearchFailedError",
    "SearchInterruptedError",
    "RunExistsError",
    "RunFileError",
    "ClusterError",
    "ClusterInputError",
    "CompareError",
    "RunFailedError",
    "MissingExtraError",
    "StorageError",
    "StorageAccessError",
    "AutoaugWarning",
    "DataWarning",
]


class AutoaugError(Exception):
    """Base of every error ``autoaug`` raises on purpose; its message is written for the user."""


class UserInputError(AutoaugError, ValueError):
    """Something the user gave is wrong (a flag, a config value, a reference, a name)."""


class DataError(AutoaugError, ValueError):
    """A dataset cannot be read or used (missing file, corrupt image, bad label...)."""


class StoreError(AutoaugError):
    """The policy store cannot do what was asked (see :mod:`autoaug.policies.store`)."""


class SearchError(AutoaugError, RuntimeError):
    """A search could not produce a policy."""


class SearchFailedError(SearchError):
    """Every trial failed; the message shows the first error."""


class SearchInterruptedError(SearchError):
    """The search stopped before all trials finished (Ctrl-C, or the cluster went away)."""


class RunExistsError(SearchError, UserInputError):
    """A run directory (or Optuna study) with this name already exists."""


class RunFileError(SearchError):
    """A file of a search's run directory cannot be read: cut short, corrupted, or written by another
    version of autoaug (a pickle naming a module or class this version does not have)."""


class ClusterError(AutoaugError):
    """The Ray cluster cannot be used as asked (unreachable, wrong kind of address, no token...)."""


class ClusterInputError(ClusterError, UserInputError):
    """Bad input about the cluster (a malformed address or one of the wrong kind, an unknown job
    id, an invalid environment variable or resource count): exit status 2, not a failure."""


class CompareError(UserInputError):
    """A comparison cannot run as configured (bad policy reference, stale results...)."""


class RunFailedError(AutoaugError):
    """A training run of a comparison raised; the runs that finished before are saved (re-running
    resumes)."""


class StorageError(AutoaugError):
    """A write failed because the filesystem is full or over quota (the message names the path and
    says to free space there; nothing half-written is left as if it were valid)."""


class StorageAccessError(StorageError, UserInputError):
    """A write failed because the filesystem is read-only or access is denied (the user pointed at
    a place that cannot be written: exit status 2, as the preflight's writability check)."""


class MissingExtraError(AutoaugError):
    """A command needs libraries of an optional extra that is not installed (see
    :mod:`autoaug.core.extras`)."""


class AutoaugWarning(UserWarning):
    """Something the user should know that does not stop the command; its message is one line
    written for the user (``autoaug: warning: ...`` on the command line)."""


class DataWarning(AutoaugWarning):
    """The data allow what was asked only approximately (the message gives the counts)."""
