"""Resource quantities as pod specs write them ("500m", "1.5", "128Mi", "1G"), read as the API reads them."""

from __future__ import annotations

import pytest

from pykubelet.api.quantity import cpu_millis, quantity_bytes


@pytest.mark.parametrize("value, millis", [
    ("500m", 500),
    ("1", 1000),
    ("0.1", 100),
    ("1.5", 1500),
    ("250m", 250),
    ("2000m", 2000),
    ("0", 0),
    (2, 2000),          # a YAML number, not a string
    (0.5, 500),
    ("1e0", 1000),      # a decimal exponent
    ("1E-3", 1),
])
def test_cpu_quantities_read_as_millicores(value, millis):
    assert cpu_millis(value) == millis


@pytest.mark.parametrize("value, millis", [
    ("1.0001", 1001),   # resource.Quantity.MilliValue rounds up, never down
    ("0.0001", 1),
    ("1u", 1),
    ("1n", 1),
])
def test_cpu_finer_than_a_millicore_rounds_up_as_the_api_does(value, millis):
    assert cpu_millis(value) == millis


@pytest.mark.parametrize("value", ["700m", "9m", "13m", "102m", "2.007", "2.047"])
def test_cpu_written_in_whole_millicores_reads_back_exactly(value):
    """700m is 700 millicores, not 701: the number must not pass through a binary float."""
    expected = int(value[:-1]) if value.endswith("m") else round(float(value) * 1000)
    assert cpu_millis(value) == expected


@pytest.mark.parametrize("value, size", [
    ("128Mi", 134217728),
    ("1Ki", 1024),
    ("1Gi", 2**30),
    ("1.5Gi", 1610612736),
    ("1G", 10**9),
    ("500M", 5 * 10**8),
    ("1k", 1000),
    ("1e3", 1000),
    ("1E", 10**18),     # E alone is the exa suffix
    ("1Ei", 2**60),
    ("64", 64),
    (1048576, 1048576),
    ("100m", 1),        # Quantity.Value rounds a fraction of a byte up
    ("1.5", 2),
])
def test_memory_quantities_read_as_bytes(value, size):
    assert quantity_bytes(value) == size


@pytest.mark.parametrize("value, size", [
    ("8.3M", 8_300_000),
    ("16.1k", 16_100),
    ("32.2G", 32_200_000_000),
])
def test_decimal_memory_sizes_read_back_exactly(value, size):
    assert quantity_bytes(value) == size


@pytest.mark.parametrize("value", [
    "abc",
    "1Zi",      # no such suffix
    "",
    "5 Mi",     # no space between number and suffix
    "1K",       # kilo is a lowercase k
    "1ki",
    "1e3Mi",    # an exponent and a suffix together
    "1e3m",
    "1.2.3",
    "Mi",
    "--1",
    "0x10",
])
def test_bad_quantity_raises_value_error_naming_the_input(value):
    with pytest.raises(ValueError) as caught:
        quantity_bytes(value)
    assert repr(value) in str(caught.value)
    with pytest.raises(ValueError):
        cpu_millis(value)


@pytest.mark.parametrize("value", [None, True, [1]])
def test_non_quantity_values_are_rejected(value):
    with pytest.raises(ValueError, match="invalid quantity"):
        cpu_millis(value)
