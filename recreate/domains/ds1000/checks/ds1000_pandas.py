"""Runs INSIDE DS-1000 sandboxes: the pandas half of the ds1000_data codec (mixed into its Encoder and
Decoder). Values keep their dtype: numpy-backed ones go as arrays (object items one by one), categorical,
timezone-aware and other extension arrays as their parts; an Index keeps its dtype, name and frequency.
"""


def is_pandas(value):
    return type(value).__module__.startswith("pandas")


class PandasEncoding:
    """The Encoder's pandas kinds (its `encode`, `array` and `unsupported` do the rest)."""

    def _values(self, holder, depth):
        """The values of a Series, a frame's column or an Index, kept with their (extension) dtype."""
        import numpy as np
        import pandas as pd

        dtype = holder.dtype
        if isinstance(dtype, np.dtype):  # numpy-backed: the array itself (object items one by one)
            return self.encode(holder.to_numpy(), depth)
        values = holder.array
        if isinstance(dtype, pd.CategoricalDtype):
            cats = self.encode(pd.Index(dtype.categories), depth)
            return {
                "t": "categorical",
                "codes": self.array(np.asarray(values.codes)),
                "cats": cats,
                "ordered": bool(dtype.ordered),
            }
        if isinstance(dtype, pd.DatetimeTZDtype):
            return {
                "t": "datetimetz",
                "k": self.array(np.asarray(values.asi8)),
                "tz": str(dtype.tz),
                "unit": dtype.unit,
            }
        return {"t": "extension", "dtype": str(dtype), "v": [self.encode(x, depth) for x in values]}

    def _pandas(self, value, depth):
        import pandas as pd

        if isinstance(value, pd.DataFrame):
            columns = [self._values(value.iloc[:, i], depth) for i in range(value.shape[1])]
            return {
                "t": "DataFrame",
                "index": self.encode(value.index, depth),
                "columns": self.encode(value.columns, depth),
                "data": columns,
            }
        if isinstance(value, pd.Series):
            return {
                "t": "Series",
                "index": self.encode(value.index, depth),
                "name": self.encode(value.name, depth),
                "values": self._values(value, depth),
            }
        if isinstance(value, pd.MultiIndex):
            levels = [self.encode(level, depth) for level in value.levels]
            codes = [self.array(c) for c in value.codes]
            return {
                "t": "MultiIndex",
                "levels": levels,
                "codes": codes,
                "names": self.encode(list(value.names), depth),
            }
        if isinstance(value, pd.RangeIndex):
            return {
                "t": "RangeIndex",
                "v": [value.start, value.stop, value.step],
                "name": self.encode(value.name, depth),
            }
        if isinstance(value, pd.Index):
            freq = getattr(value, "freqstr", None)
            return {
                "t": "Index",
                "values": self._values(value, depth),
                "name": self.encode(value.name, depth),
                "freq": freq,
            }
        if isinstance(value, pd.api.extensions.ExtensionArray):  # e.g. a Categorical, from .unique()
            return {"t": "ExtensionArray", "v": self._values(pd.Series(value, copy=False), depth)}
        if value is pd.NaT:
            return {"t": "NaT"}
        if value is pd.NA:
            return {"t": "NA"}
        if isinstance(value, pd.Timestamp):
            return {"t": "Timestamp", "v": value.isoformat(), "tz": str(value.tz) if value.tz else None}
        if isinstance(value, pd.Timedelta):
            return {"t": "Timedelta", "v": str(value.value)}
        if isinstance(value, pd.Period):
            return {"t": "Period", "v": str(value), "freq": value.freqstr}
        if isinstance(value, pd.Interval):
            return {
                "t": "Interval",
                "v": [self.encode(value.left, depth), self.encode(value.right, depth)],
                "closed": value.closed,
            }
        return self.unsupported(value)


class PandasDecoding:
    """The Decoder's pandas kinds (its `decode`, `array` and `_items` do the rest)."""

    def _ExtensionArray(self, node, depth):
        return self._values(node["v"], depth)

    def _values(self, node, depth):
        import pandas as pd

        kind = node.get("t")
        if kind == "categorical":
            cats = self.decode(node["cats"], depth)
            return pd.Categorical.from_codes(
                self.array(node["codes"]), categories=cats, ordered=bool(node["ordered"])
            )
        if kind == "datetimetz":
            naive = pd.DatetimeIndex(self.array(node["k"]).astype(f"datetime64[{node['unit']}]"))
            return naive.tz_localize("UTC").tz_convert(str(node["tz"])).array
        if kind == "extension":
            return pd.array(self._items(node, depth), dtype=str(node["dtype"]))
        return self.decode(node, depth)

    def _DataFrame(self, node, depth):
        import pandas as pd

        index, columns = self.decode(node["index"], depth), self.decode(node["columns"], depth)
        data = {i: self._values(column, depth) for i, column in enumerate(node["data"])}
        frame = pd.DataFrame(data, index=index) if data else pd.DataFrame(index=index)
        frame.columns = columns
        return frame

    def _Series(self, node, depth):
        import pandas as pd

        index = self.decode(node["index"], depth)
        return pd.Series(
            self._values(node["values"], depth), index=index, name=self.decode(node["name"], depth)
        )

    def _MultiIndex(self, node, depth):
        import pandas as pd

        levels = [self.decode(level, depth) for level in node["levels"]]
        codes = [self.array(c) for c in node["codes"]]
        return pd.MultiIndex(levels=levels, codes=codes, names=self.decode(node["names"], depth))

    def _RangeIndex(self, node, depth):
        import pandas as pd

        start, stop, step = (int(n) for n in node["v"])
        return pd.RangeIndex(start, stop, step, name=self.decode(node["name"], depth))

    def _Index(self, node, depth):
        import pandas as pd

        values = self._values(node["values"], depth)
        dtype = getattr(values, "dtype", None)  # as sent: an object Index of numbers stays object
        index = pd.Index(values, dtype=dtype, name=self.decode(node["name"], depth), tupleize_cols=False)
        if node.get("freq") and isinstance(index, (pd.DatetimeIndex, pd.TimedeltaIndex)):
            index.freq = str(node["freq"])  # a PeriodIndex has it in its dtype
        return index

    def _NaT(self, node, depth):
        import pandas as pd

        return pd.NaT

    def _NA(self, node, depth):
        import pandas as pd

        return pd.NA

    def _Timestamp(self, node, depth):
        import pandas as pd

        return pd.Timestamp(str(node["v"]))

    def _Timedelta(self, node, depth):
        import pandas as pd

        return pd.Timedelta(int(node["v"]))

    def _Period(self, node, depth):
        import pandas as pd

        return pd.Period(str(node["v"]), freq=str(node["freq"]))

    def _Interval(self, node, depth):
        import pandas as pd

        left, right = (self.decode(x, depth) for x in node["v"])
        return pd.Interval(left, right, closed=str(node["closed"]))
