"""The context assembler: sections, budgets, rendering and the report."""

from contextkit.assembly.budget import (
    AssemblyOptions,
    AssemblyResult,
    BudgetError,
    assemble,
    resolve_budget,
)
from contextkit.assembly.report import AssemblyReport, ItemReport, ItemStatus, SectionReport, SectionStatus
from contextkit.assembly.sections import ROLES, Role, Section, SectionError
from contextkit.core.profiles import (
    CacheRule,
    ModelProfile,
    ProfileError,
    get_profile,
    list_profiles,
    load_profiles,
    register_profile,
)
from contextkit.core.records import EvidenceItem

__all__ = [
    "ROLES", "AssemblyOptions", "AssemblyReport", "AssemblyResult", "BudgetError", "CacheRule", "EvidenceItem",
    "ItemReport", "ItemStatus", "ModelProfile", "ProfileError", "Role", "Section", "SectionError", "SectionReport",
    "SectionStatus", "assemble", "get_profile", "list_profiles", "load_profiles", "register_profile",
    "resolve_budget",
]
