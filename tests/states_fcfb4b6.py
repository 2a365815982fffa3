"""ThreadLoader states saved by main at commit fcfb4b6, as it gave them, for
``tests/resume/test_states.py``: a newer loader still loads them.

Made by running, on that commit, each loader of ``CASES`` in ``test_resume_states.py``: taken
after ``got`` (the global generator seeded with 11), then loaded by a fresh loader of that
commit (seeded with 99), which gave ``rest`` and then ``next``. That commit stored the kind as
a ``Kind`` member (later versions store its value, ``"map"``); a generator's state (5056 bytes)
is written as its bytes zlib-compressed in base64 (``_state``).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

from torch_threadloader.plan import Kind


def _state(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


STATES: dict[str, Any] = {
    "map": {
        "state": {
            "format": "torch_threadloader/state-1",
            "config": {
                "kind": Kind.MAP,
                "batch_size": 3,
                "drop_last": False,
                "sampler": "RandomSampler",
                "batch_sampler": "BatchSampler",
                "batches": 7,
                "samples": 20,
                "generator": True,
                "sampler_generator": True,
                "order": {
                    "type": "random",
                    "length": 20,
                    "replacement": False,
                    "num_samples": 20,
                    "generator": True,
                },
            },
            "drawn": True,
            "frontier": 3,
            "done": [],
            "rng": _state(
                "eNqVmPk/llsXxo2pTJWxDCEJoUQhQ6dQGSJRKoQMhZQoSqTMCiUVhQZTZhlOZTgqkkI0UI5kylx6otcs533X5fwDr1++Hzz3vvde61rXWvvhYJr/OcHCxMT8P7L8+/tUSsQZ4i5F4X3Elxk2WcSsQoNDxCUMcQ3iwyrT5cSMmKrHxMPHxX4SWUwDnxIPFGzPIDK/FnIjjqp2WhErVgcUEYNKD3cR9R7mdhK3NwmwEjsfeJwiWrY4v8O6Lf4mxN2hrM+JleMBFUSrKCus88y3UolorF71iGh31MWMqDkuykks930fT9RQybUhnrtyRZKo6JhkStymHuCJfef4phK/vPEMI5qm1eI5ZwfvbcSrua3yRGmpQVWi0XX2y4hD3LFpYnYZTzbOm9t2kLhhZjFCuqmqQArPMY6cIP7MXIP3+Hxz9CD6nlT0JirdXXiceK1+EeJm71pvTnz3QyaRqBUnOEFsNi5UITbGHW0mluWvKyWeVvMcIv4z8oyDGF7wEfEeUlqxiTi7ZOcn4oMThyyIrLMi/xD5uXO5iPFx53DO9pLQGGKTSeEg4vKHM+KxSmWijmg7xaxOjIg9LELk3DqZS1wqNP6VyDfV8hJx0DdMIqq9ZFYmPnlr/QdxXPoG3l8YeA75UtvKZgBdLNNDHA4KeOQgb9WufxO9dNj/IurMMskRz1dIChL1e2OGiaVvheeIMR2WPxAXS2XoqVH78hqsP7v+G7E7w/kJ8cNK9lDip9D8XqJsgOt+YkFEF3SXXsKZT/zP4HQKkS035zX0PJJtSVSPaUaeL8bIihOLj3v/gh7ep+F8SvwC2Mffa7mRf9/T26CTUce9PMTQ8JKlqLtTLqNELpueNuKPolJf7M90xpiYEJwMvVw4c+wF9Cr6Jo0Yl7HHEPE5sxpxDJMMcCQKdR84R4w15EH99TG7431Xo8qxT092P3bEsWIUnxPOXHuTeIRtAPXr/tj1JPJY9VkbdSky1ER82uqF9z0/pveeqC37pJJoYmyynbg67yvyksaiGUzsnTBFnIeesh3FPlOYzxNv7rCtRp3m1MNHQm6HBCDOXbsXEG3WXHhDdDhthfXjnV/Bj0KOMGP/YX5OgYjbbW7Uq/X2h/CbXX3xWKcrNWIh/MHpAOJ98Egm/MF5yBh1coJTDH5w62IB1iksHsH51PRZ7OBHx9hBO1HYHlOGCLMY/JChg/Xls+x9iHIMvTHi3SambsTn/ntZYu2XWPiLi3Yr/v5dzw11IZQnIkMcYXyFHjvjyi4Q/Rkd/dCtBB/q7l5JKuq+rd0ScXIRTdxAlGC9gv3cuT73kRiwrKCFODfgDj0OLbJC/vT0OPfCb4QToE+fn/HYp5BlF/K90VYGvmVyT/Q+MfOQGM6vuFJ6HbHnBAd0NtDwbhHqgF/1A+LUEww9+QzGQW9uyfujsX/mauy7Mtp93sfSLiqinny7GqETvcAbxLUV+YiPcVzQb+KjWFfkh2+uvIEoWtSJfX7wHEPC33+Tgo4idcsuEXmP/4XPpbwy2An9askgrqo9D5DfqqJZayKj5l0k8VXUt7vEFwJ38PyA0VL4odLv2Hl/XWmJ/sbWNQv/8K/fx4163iKDftDrxMKAnyZmIR73xnTh7wPnViJ/u82D4nAOZTHkJ+FYK3z61KOrLtBp2Sz+75Cw6TTxeNQq+NF60zXoo3yHPrkTFUw6poj73MN3EddFt0D/Z3TCUT+2I2v/JJbsiEEf+vXpInz1vIW0LVHMpRV64ffcakQcPmuIPpkRl4z+dr3CDTrzsxbDuV94r8LzQfF80ujnkk/gy/L8S9FXH9sn4v9H3VThj0dNetCfO+o57sFXdKSgh5bMYDy/SaMN/Vqtjw96nTS+hDpdZR4P/e/WebSDeEVW3B/1aek3Dn9ReTtCrLYQY4NOFLyxvxu/dKBbC28PvF9iJhzrccd8UEAdL/oK/UQNh4WgLvkO4dxRkq2IrxzvkC7262oUjv8fUkc/0l4gA922M2NsYTrbJoW42jaeWYv+/WxyCTG1Q70AcX37H/hzsoLMZuIlRpw9dL493gv1VOyBfhrJY4a+3pHmg7ng/gsu5Ptsw8ZnyBvHDN67X84d/ieU6LuYaHg5AfFZqK2agDlFI+02dG/LBt3YXqqbJAZezYRuHdQjURexRtzo3xETzzE/+A82Q3cjQXnQVfIdlc9Yr0kV6w+uZhkgLjt4HD68NKACer1zwQw+lRfEQN94vMoO/WraxR/7sFvvD13kaK7rg79mLyuEn0rO95ODr4Tg98qBMuh3I/0K6FNny1u3YJ9JV6FDTs4++PN1nUXQTeaf7PCn6m4V6G2YYbgS80xXF57v4ddBn49YOIX+IG/w8i36huE44qFSz4q6dNyzE/NBcn/JAWJ/LD/q02KcDfPI3t+bsV+/akec229SA3UWwnwb80W+lB50GTaV4Uzk6MmCb7la2cKH3kx0Qs8bWtchnr01psiv0bA7L3xoVSV8W1e65xrimt6B+Yh/nBe+Mzz6LApzZcDkfH8prtXEPNvxG75tkDWBuH2+/Rv5GbESR/40Y09B90nnM+GXhytkoKeavjP10INEOvRhw18DfZmsKMHzNWb2qHd/6QzUyZOO5chPlX4+6il4+TT+PtV0A/1LjX8DdLvMOQdzcqhWsyj8dOvULeyH3x86jczdAX9taE9CPTQ63cH8GVLZC916VsZBLyWXJMuJko+L4QeeHPe0iGZlWtgv74YJzHFcJYXIV4WAPHQQ0JaHfrRisR76Wk7vpXTiYmeRWuKOx7oPUNfK23Ge+s4crJu+uQDxuLdLAOsstrmB/iP6PQRznsdYJny4w9gEdedV+xHnbZ28DX1IyDjh3mLnFoHnHv9IaCXucS6D3mwUhTPhF9w18OPMhl8bcX+w4MG8k/DsN9YztfqF/Esw+TlgfjrJgTn6gOFy9Kk6R2/M37U1s/AlXqVRzHXWcZ+Q58RzG7G/Wx8twPDuOsxfZpl7MYd+bK7AecJcNTGQHJ81QF7KWBShd84ycfStfQw3V3xevhx5fK7UjzlS++RHzMW7dpsj7/0TvejjXoHPcM7pC9fQz7aMpmOd/EHFCMyzUg2rcV+oK8c9ILpWEPrVzxvA/qoH9bCuQMZ9Aegyrxh58pDcjTnHy3roC/yuqgV6UKzQK0HfafVH/VkcSkLfumr6N/wnf3Mg7i+KGTbQmbbFFfj2ieJTuGckzFnkoU7FZTHfMc64I79OZRxOiN/RdMSFNf/FfJ+s2Ia5XsFtfq7Z+/oB5sWh/S+/ExcksWJ+GfNhgn6i67Ogc6c/WGbg93r98IOyZQ+rUGedNzEXCKSyIb/9icOzRJk2H9ShR6gW5ohPBW8wz8szyeBcP0O4UHdj+65AryLjC+Xm7zsPcX8pHb2F8zT2F6LuxJ2fwxd87OdwL8uwXo/PC7WtOoK4yqzDvTLthQUz/DZnL/pwkmP/CszznQPYz3YV74fovz7O6LdbKhQQ7+sKI/CZgml+1NdMRi7O++VnMXTcsvTX/H01WhjzV3CUJubhxLfj8FMOeS68t6l8Dveh59Il6J+yGh9R/5Z9ynhukUE/4rbf0Urz3/1hftATH0a/H/Evwv01XcAeOnzR8QXzq4OZMebS7ghVzJ+f604hjoMbGbjfa9mFQSeDdc2Ip//dh6i7sJ5Q1HVQcSj0v2yOB/N96fWnmA+yxz7Dt2sdFuB7iLR+TsSbYXAjGfer5M+ozw+8jIvEYwtWYL3W0ymoe7bDxRjA37DWoV8k9axAXjQsi9DvAjsEcX8V/C6F/ri8MU2YWBQsogZ/9OCHr73vW3gHfSL5Mu43pvEpqHNnqw+41y1sKsW+6zjNUYeZe0bhn+a8Grgf8bQqY07JeLQf9zE1iSz4aevuIfhZdtFO9P3SiKPQT9vOQORVV9ILur1l+xJ/tw5ZjHuf3EwF6qX92tQe4utFg+hP3y1Wov/bGsVDX8dyXaFLz+4+1D2LkQt0tWR9MnQg+aEZ8dF1UENdjtjfhs46YmTn39ueiHq7Ir4XPr/LNxXzVLZkGvxQOS4FPhc9vhX9jDk5Dz4/PSGM+m8vSIaexBUqMQ/qW22CTqua5fjQ/9p3YM5XX9uC7yeUFXdhPvO7+gq+nmobhDnkgG834irA2I997pnWxvcbN6O+Yf6oT42EX0yPuKEuDjd1QzcNgmLIq7mdPr6HseGMxP3GiLke+lnsXYfnPnUKwme/1Iv7If63OOfvSTu4cX9UHZBux3x5LQp1bz57A/WxkWsC50465fyT6f/4+S9wENnP"
            ),
            "rng_global": _state(
                "eNqVmIk3lmsXhxsUpYyNSsopREUpyRHNA5EjQoP4lMIxlvckOqRJiqJEAyFOgyg0S5SUJg0KRSOJhAZFKb51X53vD/isZV3rHZ7nue+9f/u39/3Kdvr11/nf///9yf5L+7fWKYKbfL6vFwyKOlonqOZY9llQUXVgueBQlS99BY94RXJpfffv0wQXN+eqC35U0fcWzFEYPkGw5IR5vGCotNwawVzF364JdsvYckvQ67nnDMFKLY/TgkcbJloI5o9/oSf4aGf4KMEL47wHCCpLKccI3skePkvwW4rlOdblPuaeYN1+RVNBmXsTSwVXRw85KZhlunko+3TZ8k2we036WsGq4Jp3ghsWBHcXlG7zW8Vr02fsp0f/u1aCFo7+hwX/CGoaLzh4hVGCYPunVta17I7+K0FJpVWroE1snyRBlRzJT8Ge447os84BUr6C48d4LREcGJfaW1DOxe2MYGNwXa7g/GsynwT1huw9KNiUli/Dui7t7M/zV6neZn9pOncE3Xb3qBTsVbWL/V5RkqsXvG745pBg1NxR7YLlWqXEb2qRFfEysym34/3locsEX7yzJz/yK4rmCN5asiVRcPThYRrER1KCPlKv5+8S1Mlr1BKc4n2C7zel27sLjv0ZvVvQQ6/KGh098lkgOPzykyvkozrnKHl2W8D9K7bfg00WR18LeveM1OW6zUerBJ1DgtCPQXe/OL4/6+JMwUUJjiq8Phy2UHDJ/Mizgr4Jel3QY5s815fV5g9hXe9jfYjvi1QvQY1yZfR6TSO6WPDN7acXBLcoXiVPR0Ye1hGcU2yEforf7SSP6a8UTxH/zHjyUhRhTRysW+tYh/bytZaCLmGz0Xf/qVVm5G1N/0mCgbc1FQRbVL6oCVY/fI2O9cxTcoi3pyf7mqD1qFmwoCCL/ayIPeRA3ZmcQwe6e5cT90PP579F11a1NYJrTOPPozs9ow3k6/dX5PuHo7UB19sa/in4UG0/df7VdQe6uT5uJHlOai/thv4PrTcRVNr1jvpIDFCnbksNNdnP4qDCEMF/TlUTR09Fm/vE/XII+0uyjKKe01NvdBW890nrCb7TcpzrQx80vKduMte+wTcSi2wFv3yeoiw4eemr/6DXN37reG5WAfft1vfaRp4vW+wnOCi1hHpXatuArurjleG29nj2OXP8DOoq6VBJBHVm4Eye6nfPZd2fY2Lwsw3ja40Fw/KNNQXnXT5PHXuUVN4QzFBQIU4bE2t7Cdp5T5tMXING4SeBZxZTR3erkocJRsTc4D6WkiT2s8ZjhDn11mUtPtHf5hl5+u5WvU0wfOuBkYIjbNKi+Vw565eOLJXIS2HtS/RptDCPeO6XN8wWzAxOwIe1o9Lx6VqDOfiV3JtZc/FV16/o3uNTYZjgqMeZDwTNp4dFCkbGF5BXlwT7APLY5IpPatvmE59L8clB7Nc5Fz2otOj+RZ1+rCHuK3rNCOc6KYur1FlCgSvXDRxBXWk5Heb7ba967MSn3A7jbznrVJwF9b9OYJ87qlfx+RPtPc/Jd7QDfj7dv5C6mam2vknQ/27Xx4KuBhmsN2jvsdHoN+fROPqC7GP8qaq3DfmQ9izEx42NXKnX7f1+ayDPJxLwpUaXDA/qzvaBo6Cp5jLeX3TcGF2sdNq5RTCv7zt5wWl3DMiDVumJNsGXod+LBAPU+pEPP9MPxKmmZ4WRYJpLeCH+ZbQF/1p9ewv53pw7HH2N7x7POivun6eevyik0t8MZz4/gH8tWkAc95uZNdJfrNwXo1fdaVKCz2/IP8SPhxpRt59OW9M/JTV92M+Hg4+5/llLHev+ri6HT0sPGzmV/mWigE7Xr/4Pfnmhoz8+ervVOwpfu3APX2mT2JHHYzld6evBkXsm4ut6dviP54vf2X9ppFGm4Kli2/2Cs+/ZorPZp489JS8b59DvH/sulAieWfogWLCfRRp1seTIqjz0Z+dJv5hm+xYfW1h1GL24T80eIfhuW+J8wfujoyf/8t2Xm7n/e8NNgq+eO0kLvrZPpa9VrftMnud6dSIP546YVFBvwS74wuaejl+Yk56vYO5pPNbbX9Dn87MWPo9rx0fcPQtsiJt3DL6fUqQ5iDw0RKTj63ssLrO/193Qm0HQNifW42s4XXBnsS1912D9LPKpcm06fnbcwJY6CgyQ7MBHM+TIo1lHJ/Rwt1LhOnlasnow/ubiSV3MitWhf8gpd2F/GhGe1IOR9B3qfpPXd67bUJFCnPNUuuwVfJBlyfuDPgRRxxejvZm3Ur0S8SVNmT7c52h/2zH4hEkJvpllkMP63zpJ4/eTTTuIY766yWzi1Wk5fWyW3j3iOszHi3o97xPKOjOlXpLXcNUC8vDNO4R6b271wldj72b04P7vVdFRhlT5d9738s9gjloWg56u5hQyp1XV3CZ+ahs0F+E/nTbQT/qVLeX7U3elka8E7WT89cyyQeTlZmILdaO8fQZ1ErThC/369I/oZzwvxXisYGueOnOviWQSfXTtvHh8Z0Sj2TzB+Ek/eV6+mTw+uavIin11n6m/kr7+YzHzV8Sdf5gH/bO1iHd7s/VX9C13hf4e9HlfsuDIkPXsw/ibHj4yzM/uBT5jFIqOjFN70le3lZnb8/nDNuaRuSkFA5lXqgZSz9Xj7xPXxOBCfCihLZbXPua17LOvyWD63a1LH+iz+4buSkOHD3Zwn73Zq6rpX3FBzMlv511j3YGLHykxJ74fiB/IJzUZsq/dw+kX86dtXI5v1LoyJ6sGDOa+N51ryFelxvmt6HTEFvSjLblPnhZJR7N/845PzL3OtwKpt5THT9nvybgx6Gvykif78FHVcua6Vm0d/MAvvRjfv+3ocZHzQMueFeSptWg1846OIvN7QHoLPqE5qx4dSEV6MUevuHn/CLrd24rfPZvoTLx9b0xnP6WJYfRP87pr9E+F3cHER0t/Jz5RNqyDOf603V7mulNNOvhrqLkfz1/6ti/9xEmuE/PJoqGu6F2/SYF++ae6HD7zd3sP/LqbZQS6ndtwgPXVTtr6knNTQuEJ+oBlNvHrFSA7HL/XTabugosj5FiPTwN+6/ztKTpbVbaVeEadL+xDn/G4jH+4n93XwTypre5C3KbPZ+7sJy2FLsoHd6VvFPVOom/06erO/Kwo6YXv/n1yF3oLOeGLzteNymdObixr/oh+pJOJ4zftDs49R9L9iEN2VW4/9Jh8nLlvZZQdOpX8PRpfvxHzCv3bx8XtgbPHMc81F63+dQ56Xp2KLjLbiOegU6qcO0ObMomrhlIj5x9FrwTOE7u3vsjn+xEn8Ln6yJPosriPKnksqJ9AX5OxPEf/KR2xmPUt8JdH/xIVRc41aZuVqQO91Ifo3WTlE3TkVH+OfHx/asz8NPJIJ+aVYO9n+PxTB3fm+o9DOhcQ9wsJ+IjWn9epi4t9p5Gf7bIXpzDfuDlQD24qbvTFIs0Q/PBYsRPnu56bfXqyj/JK+kSmQwpzxX69XPJ6Oa6S85d9UAe+PyjrOueZfy744m8DIy4y/0+PfYi/TGu8/ptgb5vbrDf8WAz5+CtvB3PPNyNTfO6Ygv1SQaugKcyX7a66zEEVMpeYR/yy6zgvdb/vwPnWw+w9/Sww8h39e2yoGvWnmxZC3UwcmUR9O2mrMkepn30TiK/HyTEPPs25gB+ut75D/xi3+XfiIGOiRP5kS9PYl69dCj6yrncR/eWJsl/Dr74Qi04dws//4BxwxZK5JXXnAHRh1KZEX3bL3sH6dPyW4iN//OyD/s9clWYOcyiYwXx9zETd+5duk5l3w1JMWHdnq+jj1PWYRPSX4S/5QL1K+eKT37Q66IcGIRLO4afdi0oEl8vqEu/HievIR9IPC/q4jcVCzj2XO19F91F1Wcx90oabyEdbxULyUBFTwvzudz4aPe23zkUX7V0Gsy65mCjisawwEt1uHyRhv1kXBvE7Qr92Dfq9RnMNc1zlsJvMo/6HNzEnGOoqcD/HA7rkcfc2H+IwwL6ZPF85oE8f7DnhK/stzyugP2wyu4vP66iF099m/uHA/hrCUqmzA01q7Ee5WYZ4S7seZB7MXPsXdRT5OpZ6i5r/k/ntQ9hG4iodkIuuz7Zk8LvL1X3h+GVw82T0qFhzkXqWuC2iL9QX2N5kHl/TjecsGP4Rf1a7Wo5vPBw8ljnOuCAcXT6Z2MDcdDDZGV/7mFqMXwWufs/vENsqPDjHKay8gr/WlrVx3rrkYcnvQbFql1j//TRt/Pt1SjD71l+bx+80y1RHDej0f/z9F/Jw3uU="
            ),
            "errors": [],
            "finished": False,
            "base_seed": 1407639518939636932,
            "drew_base_seed": True,
            "loader_rng": _state(
                "eNqVmPk/llsXxo2pTJWxDCEJoUQhQ6dQGSJRKoQMhZQoSqTMCiUVhQZTZhlOZTgqkkI0UI5kylx6otcs533X5fwDr1++Hzz3vvde61rXWvvhYJr/OcHCxMT8P7L8+/tUSsQZ4i5F4X3Elxk2WcSsQoNDxCUMcQ3iwyrT5cSMmKrHxMPHxX4SWUwDnxIPFGzPIDK/FnIjjqp2WhErVgcUEYNKD3cR9R7mdhK3NwmwEjsfeJwiWrY4v8O6Lf4mxN2hrM+JleMBFUSrKCus88y3UolorF71iGh31MWMqDkuykks930fT9RQybUhnrtyRZKo6JhkStymHuCJfef4phK/vPEMI5qm1eI5ZwfvbcSrua3yRGmpQVWi0XX2y4hD3LFpYnYZTzbOm9t2kLhhZjFCuqmqQArPMY6cIP7MXIP3+Hxz9CD6nlT0JirdXXiceK1+EeJm71pvTnz3QyaRqBUnOEFsNi5UITbGHW0mluWvKyWeVvMcIv4z8oyDGF7wEfEeUlqxiTi7ZOcn4oMThyyIrLMi/xD5uXO5iPFx53DO9pLQGGKTSeEg4vKHM+KxSmWijmg7xaxOjIg9LELk3DqZS1wqNP6VyDfV8hJx0DdMIqq9ZFYmPnlr/QdxXPoG3l8YeA75UtvKZgBdLNNDHA4KeOQgb9WufxO9dNj/IurMMskRz1dIChL1e2OGiaVvheeIMR2WPxAXS2XoqVH78hqsP7v+G7E7w/kJ8cNK9lDip9D8XqJsgOt+YkFEF3SXXsKZT/zP4HQKkS035zX0PJJtSVSPaUaeL8bIihOLj3v/gh7ep+F8SvwC2Mffa7mRf9/T26CTUce9PMTQ8JKlqLtTLqNELpueNuKPolJf7M90xpiYEJwMvVw4c+wF9Cr6Jo0Yl7HHEPE5sxpxDJMMcCQKdR84R4w15EH99TG7431Xo8qxT092P3bEsWIUnxPOXHuTeIRtAPXr/tj1JPJY9VkbdSky1ER82uqF9z0/pveeqC37pJJoYmyynbg67yvyksaiGUzsnTBFnIeesh3FPlOYzxNv7rCtRp3m1MNHQm6HBCDOXbsXEG3WXHhDdDhthfXjnV/Bj0KOMGP/YX5OgYjbbW7Uq/X2h/CbXX3xWKcrNWIh/MHpAOJ98Egm/MF5yBh1coJTDH5w62IB1iksHsH51PRZ7OBHx9hBO1HYHlOGCLMY/JChg/Xls+x9iHIMvTHi3SambsTn/ntZYu2XWPiLi3Yr/v5dzw11IZQnIkMcYXyFHjvjyi4Q/Rkd/dCtBB/q7l5JKuq+rd0ScXIRTdxAlGC9gv3cuT73kRiwrKCFODfgDj0OLbJC/vT0OPfCb4QToE+fn/HYp5BlF/K90VYGvmVyT/Q+MfOQGM6vuFJ6HbHnBAd0NtDwbhHqgF/1A+LUEww9+QzGQW9uyfujsX/mauy7Mtp93sfSLiqinny7GqETvcAbxLUV+YiPcVzQb+KjWFfkh2+uvIEoWtSJfX7wHEPC33+Tgo4idcsuEXmP/4XPpbwy2An9askgrqo9D5DfqqJZayKj5l0k8VXUt7vEFwJ38PyA0VL4odLv2Hl/XWmJ/sbWNQv/8K/fx4163iKDftDrxMKAnyZmIR73xnTh7wPnViJ/u82D4nAOZTHkJ+FYK3z61KOrLtBp2Sz+75Cw6TTxeNQq+NF60zXoo3yHPrkTFUw6poj73MN3EddFt0D/Z3TCUT+2I2v/JJbsiEEf+vXpInz1vIW0LVHMpRV64ffcakQcPmuIPpkRl4z+dr3CDTrzsxbDuV94r8LzQfF80ujnkk/gy/L8S9FXH9sn4v9H3VThj0dNetCfO+o57sFXdKSgh5bMYDy/SaMN/Vqtjw96nTS+hDpdZR4P/e/WebSDeEVW3B/1aek3Dn9ReTtCrLYQY4NOFLyxvxu/dKBbC28PvF9iJhzrccd8UEAdL/oK/UQNh4WgLvkO4dxRkq2IrxzvkC7262oUjv8fUkc/0l4gA922M2NsYTrbJoW42jaeWYv+/WxyCTG1Q70AcX37H/hzsoLMZuIlRpw9dL493gv1VOyBfhrJY4a+3pHmg7ng/gsu5Ptsw8ZnyBvHDN67X84d/ieU6LuYaHg5AfFZqK2agDlFI+02dG/LBt3YXqqbJAZezYRuHdQjURexRtzo3xETzzE/+A82Q3cjQXnQVfIdlc9Yr0kV6w+uZhkgLjt4HD68NKACer1zwQw+lRfEQN94vMoO/WraxR/7sFvvD13kaK7rg79mLyuEn0rO95ODr4Tg98qBMuh3I/0K6FNny1u3YJ9JV6FDTs4++PN1nUXQTeaf7PCn6m4V6G2YYbgS80xXF57v4ddBn49YOIX+IG/w8i36huE44qFSz4q6dNyzE/NBcn/JAWJ/LD/q02KcDfPI3t+bsV+/akec229SA3UWwnwb80W+lB50GTaV4Uzk6MmCb7la2cKH3kx0Qs8bWtchnr01psiv0bA7L3xoVSV8W1e65xrimt6B+Yh/nBe+Mzz6LApzZcDkfH8prtXEPNvxG75tkDWBuH2+/Rv5GbESR/40Y09B90nnM+GXhytkoKeavjP10INEOvRhw18DfZmsKMHzNWb2qHd/6QzUyZOO5chPlX4+6il4+TT+PtV0A/1LjX8DdLvMOQdzcqhWsyj8dOvULeyH3x86jczdAX9taE9CPTQ63cH8GVLZC916VsZBLyWXJMuJko+L4QeeHPe0iGZlWtgv74YJzHFcJYXIV4WAPHQQ0JaHfrRisR76Wk7vpXTiYmeRWuKOx7oPUNfK23Ge+s4crJu+uQDxuLdLAOsstrmB/iP6PQRznsdYJny4w9gEdedV+xHnbZ28DX1IyDjh3mLnFoHnHv9IaCXucS6D3mwUhTPhF9w18OPMhl8bcX+w4MG8k/DsN9YztfqF/Esw+TlgfjrJgTn6gOFy9Kk6R2/M37U1s/AlXqVRzHXWcZ+Q58RzG7G/Wx8twPDuOsxfZpl7MYd+bK7AecJcNTGQHJ81QF7KWBShd84ycfStfQw3V3xevhx5fK7UjzlS++RHzMW7dpsj7/0TvejjXoHPcM7pC9fQz7aMpmOd/EHFCMyzUg2rcV+oK8c9ILpWEPrVzxvA/qoH9bCuQMZ9Aegyrxh58pDcjTnHy3roC/yuqgV6UKzQK0HfafVH/VkcSkLfumr6N/wnf3Mg7i+KGTbQmbbFFfj2ieJTuGckzFnkoU7FZTHfMc64I79OZRxOiN/RdMSFNf/FfJ+s2Ia5XsFtfq7Z+/oB5sWh/S+/ExcksWJ+GfNhgn6i67Ogc6c/WGbg93r98IOyZQ+rUGedNzEXCKSyIb/9icOzRJk2H9ShR6gW5ohPBW8wz8szyeBcP0O4UHdj+65AryLjC+Xm7zsPcX8pHb2F8zT2F6LuxJ2fwxd87OdwL8uwXo/PC7WtOoK4yqzDvTLthQUz/DZnL/pwkmP/CszznQPYz3YV74fovz7O6LdbKhQQ7+sKI/CZgml+1NdMRi7O++VnMXTcsvTX/H01WhjzV3CUJubhxLfj8FMOeS68t6l8Dveh59Il6J+yGh9R/5Z9ynhukUE/4rbf0Urz3/1hftATH0a/H/Evwv01XcAeOnzR8QXzq4OZMebS7ghVzJ+f604hjoMbGbjfa9mFQSeDdc2Ip//dh6i7sJ5Q1HVQcSj0v2yOB/N96fWnmA+yxz7Dt2sdFuB7iLR+TsSbYXAjGfer5M+ozw+8jIvEYwtWYL3W0ymoe7bDxRjA37DWoV8k9axAXjQsi9DvAjsEcX8V/C6F/ri8MU2YWBQsogZ/9OCHr73vW3gHfSL5Mu43pvEpqHNnqw+41y1sKsW+6zjNUYeZe0bhn+a8Grgf8bQqY07JeLQf9zE1iSz4aevuIfhZdtFO9P3SiKPQT9vOQORVV9ILur1l+xJ/tw5ZjHuf3EwF6qX92tQe4utFg+hP3y1Wov/bGsVDX8dyXaFLz+4+1D2LkQt0tWR9MnQg+aEZ8dF1UENdjtjfhs46YmTn39ueiHq7Ir4XPr/LNxXzVLZkGvxQOS4FPhc9vhX9jDk5Dz4/PSGM+m8vSIaexBUqMQ/qW22CTqua5fjQ/9p3YM5XX9uC7yeUFXdhPvO7+gq+nmobhDnkgG834irA2I997pnWxvcbN6O+Yf6oT42EX0yPuKEuDjd1QzcNgmLIq7mdPr6HseGMxP3GiLke+lnsXYfnPnUKwme/1Iv7If63OOfvSTu4cX9UHZBux3x5LQp1bz57A/WxkWsC50465fyT6f/4+S9wENnP"
            ),
            "sampler_state": None,
            "order": {
                "type": "random",
                "length": 20,
                "replacement": False,
                "num_samples": 20,
                "generator": True,
            },
        },
        "got": [
            [1, 9, 15],
            [2, 11, 19],
            [16, 6, 18],
        ],
        "rest": [
            [7, 8, 17],
            [10, 14, 13],
            [4, 5, 3],
            [12, 0],
        ],
        "next": [
            [4, 18, 10],
            [13, 1, 3],
            [2, 12, 17],
            [6, 8, 14],
            [7, 19, 16],
            [15, 11, 9],
            [0, 5],
        ],
    },
    "iterable": {
        "state": {
            "format": "torch_threadloader/state-1",
            "config": {
                "kind": Kind.ITERABLE,
                "batch_size": 3,
                "drop_last": False,
                "workers": 2,
            },
            "workers": [
                {
                    "batches": 2,
                    "state": None,
                    "ended": False,
                    "items": 6,
                },
                {
                    "batches": 1,
                    "state": None,
                    "ended": False,
                    "items": 3,
                },
            ],
            "turn": 1,
            "finished": False,
            "base_seed": 3325388913236545215,
            "drew_base_seed": True,
            "loader_rng": None,
            "sampler_state": None,
            "global_rng": _state(
                "eNqVmPk/lWsXxg2VMZ2KnTkdJKTxOM2IlMIhQzJUshFSEjmFBjShkjLPtGUKKSFzUjQgpQw7kbmSKEMyve+6ev+B1y/fz7Y993Pfa13rWusmwPH7x4WLg4Pzv+T63+ccftWHxEBzCSuizVHn+8TRjXariKd1GiyJuwIc+ohVJ7fguRenhGYT98RfeULkTS77RCzr0hInPvE64U/coLj8ANEttFGZyHgos534QTSJh6jrPOVInNMaYEQUWxcRS6zhzJImXkrZbU68P7H7L2JC3ecLxDNvazuIB783cGOfrbz/EOuE2n5h/04/lYhDd2rkiV5/bMZ+8lnlTGKcteFXYqyRdhqRU0nuNvHsEnsZfJbgLSE+H0waIEYvd8X7B18KPyJ6rhsSJT4s4rcjvjHLjiFWvjWYJDYv5M0i8rU3nSbay8r4Ee2aC7H+LMF12sQenaP9xHgHt06io9OzYeJX25F/iZrGQ38S7277OkTsHXtUTzxmI4Y43bebh3P/4+2IxGQUdvsSj3+ePo71Nl3DfvsLonKJF35a1yB/U6JRxD9VmQbEnd/YvcSZldKjxHc103OQv8f34olFUXl430Sm9gfiVc+4H8Sf2bV3sZ9ERjn2M+feJcR/NNYU8TysizjxuQyJENlS/XuJT29X1RFlJYZ6sP58v2XEHeuZyGuRtxvyuqRLGTpp6hMMJha22mzDPpzcJZD/EC2s17Rlz2Winie3EHFR374qYsCtHOw3JXPYleh7wd6MuFHXv4ko5R3yjDh2JaiNuIbRXoR8xe4YIQoKsNcQW9svsPC8biHiycG5+CziYKWB/H1kDyOexZNWL4ldQ5Y5qIfq5Ctg58pQxMvudipRPHlFJVFJRMiW6Bcu7EH8VmbAR3yv2LQLut7uh/OvDOUMwzm8RL2hC6NsxLm3XTaZ+GuBLr5fGMSg8uYwtW3FOj90G1GnyQqhqMO9ilNBeE9byAbiH6eU2ETRRdM4Z6n+JOrOvSEP+VU72AB93WUIol52Ko3i+/lhtgyif6euClH48wD0EurkZo26VXwtTOTK1YCfPItbj3zJPA2FTkUnZuG9rGZl6I/tZDKPeJ63JwXxC7bG+bQ3yEKXXE5f4RMe1fm80I2OF3Tem2CvSHylNgtx9tOQTSJ++dqFfZ0QCsH6QivdThBVHlw/hPcItuwn6py5/wX59vXjR920910k3lAVfoznXj/DOXxTx0qJ6pKrUUcyz2emiOXqDYaIs98ixEdtfB+e70gsaSROruDGOtVzOeCvo8Y+fyPvop5z8VwiE34WNUcL59nOqfwGvsCxSxV6cVRAXqJXSdsQHwUwEP8ClijyqJ5g9h31bHwqAfG40QCfi1cyQ52Epuq4E9u9Y47AJ0wlPInTbB/4an/9F8QjI2tKEHExkF6Pcz+ZWQ4fLjSHj7nZPx8kbvZrR7x6lPqXEL3HG1HfYoWZ8K3yOQ0FRAev4qfwEUXLB8R9uTmIR7jRF/jIcFcb6kTl8g74XMKcnHDs0+c++oi7gPsY8Q6DnUncOrkZ/aP4oC18NPthHvpS3VFxKWLEios4X/oAXwvyUM/E/nPrgxcQkzxOSxLnysmjbkOmuqFDkdDU9/BzmzYn4mK1QNRnzIGMYuIhcxOcw6YhGOs3Wk1jXUdZrqXwkRci0B2rqhT+d9zew4IoL/4R/sIldxx9jTXOsYd4K6vUhChXlYd6dWSIIU+sg+4T6FMyP9F3Gv9ZAF+4V55xh2iyoOQz8qso4YbzcpysIFqJ7sH5nVzOQs88Qb3ofxY+H7DP2QttUDfT2rLq6PNeM/CBzCu70a8Cy4rhs+9UTr1AP1xpvJKoIP3rJDF1VOst/E/pCd7H7+GDvqrEY431/XNb4E+RN33gO/OPOWvAD61k4OfZHFc1ievLFqJuxzrkEMfNDhPoK8wt5ejPA2e/IT/pB/wwP7h1NiGuahXnbhErokXPw78ql6Pf5i9aAl/bayT3jfj9yWrUzQfWXMwXkoX5IaiPV5sWIw75wkex3yOj8JMjTWKor8R82cPwI/2qFfCxpCTUx9uP3fh+iKEKfdi8+bQa+/WKd4YPVg5CV5/OyF/Hc5Z+1URFjrt4Tn+gEuc8vNgIdRNzbSnifzRRHe/vMnVAnGddNYQerl18ijyylIb/QB1OTisQpY/6CSB/PUz0OQsbzQborjsUfuElGxlA3NLQif053KmAr0yGy8OHo/iVM4jGKc2Y38JNTdCXt+yKk4M/2lWgntr0diN/+S/r9xHrqxnwc1meZJzrhL8/zqk+Jwr9NEHgFZ6LqTsO/+uwkIfvrufMhE9lVaakE1cY60J/7ZWxqG+m1i0d1Nv2StRLjO0hzGO+YsGYs4TchuBLF40vdxMbQk/i/F4Fp9HP9S7ewPlioj+innze9aPfjwlwo/9fsDkEXToLzIUvznZiQC9WUVWYPwy9mqALHWUWfOnH6zLMfz2fLsFnHiTuW4T4RxdDh106LvDDxFFr9Eud4yfhuz9uj2MeS9z4C3pTDBpCvM2/6+E5/q2vUY+Cwo/xnGBxKvpZR3kt5p3TtY6Ia5/YXvhFnHoz9v0mcA10sTF5LeIqzBzDfD4skgL/9HzcnUjcbyMEX6lZG4G8Xk3f34q++3AMc1JooRDyx+Fjj3lRr8ThKnRQfR39MCHxBt5/2FUA/lMqYghf320rCV37KVxqhu/WlsAvP3j4oo8MpnoshF+E6OcRW6ovb4IuuzNw7iZ2HvLySbcXPpM0Lxh9YvappZgjrtw7CP26bNaALlv/dkB+LQ2r0YcMGwXg35LD7+AbOs5ZXcTaqVzH376UhT4X16iF3/cmBx4jnnzvinmEq0heF3E7HCqGe0U8xi4OIZ73N1EXeizMeeZFqsh7x6YM/L2szwTm2NbrU/C31l9vrhFfTjVgHvm22GIz+hKnCOKs7WYPX+idmYv64721yAG+xqkAn2EJaUI3TfHCmLdztPeg3vZ6F7/G/LrBAfOVhFsO7geJWs64f7yQYCMug/F88Du2xjB8VFhqMJKoVclA/i/m+OLeVaWx4RR83+NBHNFg4CfmCS9727TfftsJvUrPfo710kr4ZojBJttRj+GZObK4r/kU43NZ/3OsExeWjnpg9O/HXDpRwMa5GfvjAjEPvm7Zijj5mZ/BOgFPoQsT1Q7opSbhG+Yk7spviGu9FifmI8VJQ+htlp3c7/pPfYt5tu5d7Cv035MymJtNnQ+i31xWWY86a+T+iP6UmZ7hgjkg2xzzmJVnNXxSdWss3mM+JoO52mB+InRc0lcA35o/eU6LaPTvOdyzsm1L4C+RdSr6qHu1I/CPNOUAzGvWKsHwqQQFD+jydhLbHvOK8wTyvYqVDr/TjEzDfFDo14IrtZnTNOq2wswIc8x4SC/606SVOXxrOzMV+xG30lQjLvc/Bp0q9V1AX1/amoX3vPLvx31ztuabccxtelqoh59/WcNnis4VwEccdpxBHzywd/Qn7gFBM/BPHuld2NcHr1rcTwT1e54jzvbzCuGPSwfgj156IxHo8+IiqOfcCvdooi3TEXOqdxIf4pofpAof2W++FXlpXhaK90lZn8HcWF/3LB+6lTqPOHwO88d8M107hfvWizF91EtAvBbul7K/oqCXpvTpc1j3r9WI+8i1KPhaumsb9su0jEJ9a98Xv4H3qTGhL3FXfvirXEkp/HzLuCh89FKnK+6POlHL4PtHWDJ4X7R5GPrRjx0ByFv4VDbmjtoWQ9z/JoujcG8f0ypAX+DKKMdcYCHVAgOplJrAXGhxKAh+K7FnGPldzQ7D3Nsex4berkqeQ13qjuyEH7xtioWPRstb4L7w4LxkO3zEPhu+ZLQ1AJ/f3WLgHjfC64Q+8LemHs63T2wQc6RYvgzqx2JG0wv3CB025tOdFZL4fKLFEvfb+jVlxoh7Ywd87NijF9jvyN1l6NseeaW457zPi8acZtbdsBO+wqmMueR2kQb8N2ztCHzdc/r3ecWdd83HvcjlCvTcZyuC88UFuuK+U+PAjfwvPhWB+b8zXhL/32CuKsZnuc99+P6WKi/uJ9LG2+CLLR4s+Laa1uVZ0G+FBfwsu+8m9OG/LBt9L8PADf5vn2aHeNWJymAdEfMO6DPK3w33K/9ES9SLB48qdJ4yMYl6GeYeQR6YEdPwmVeGXPh7+bXH8PuaNFP4wM2Aftwn5ROKoNvIsTLcT9Z+tYEvRXhuhK6enW6FTpViz0JHK2J3o99VKEtgHl4TG7ubqLxOGHOldONH+HbkyDj8Q34jN4vj//j5DzkO7ss="
            ),
        },
        "got": [
            [0, 2, 4],
            [1, 3, 5],
            [6, 8, 10],
        ],
        "rest": [
            [7, 9, 11],
            [12, 14, 16],
            [13, 15, 17],
            [18],
            [19],
        ],
        "next": [
            [0, 2, 4],
            [1, 3, 5],
            [6, 8, 10],
            [7, 9, 11],
            [12, 14, 16],
            [13, 15, 17],
            [18],
            [19],
        ],
    },
    "node": {
        "state": {
            "format": "torch_threadloader/state-1",
            "config": {
                "kind": Kind.NODE,
                "batch_size": 3,
                "drop_last": False,
            },
            "graph": {
                "source": {
                    "epoch": 0,
                    "yielded": 6,
                    "rng": _state(
                        "eNqVmPk/lWsXxg2VMZ2KnTkdJKTxOM2IlMIhQzJUshFSEjmFBjShkjLPtGUKKSFzUjQgpQw7kbmSKEMyve+6ev+B1y/fz7Y993Pfa13rWusmwPH7x4WLg4Pzv+T63+ccftWHxEBzCSuizVHn+8TRjXariKd1GiyJuwIc+ohVJ7fguRenhGYT98RfeULkTS77RCzr0hInPvE64U/coLj8ANEttFGZyHgos534QTSJh6jrPOVInNMaYEQUWxcRS6zhzJImXkrZbU68P7H7L2JC3ecLxDNvazuIB783cGOfrbz/EOuE2n5h/04/lYhDd2rkiV5/bMZ+8lnlTGKcteFXYqyRdhqRU0nuNvHsEnsZfJbgLSE+H0waIEYvd8X7B18KPyJ6rhsSJT4s4rcjvjHLjiFWvjWYJDYv5M0i8rU3nSbay8r4Ee2aC7H+LMF12sQenaP9xHgHt06io9OzYeJX25F/iZrGQ38S7277OkTsHXtUTzxmI4Y43bebh3P/4+2IxGQUdvsSj3+ePo71Nl3DfvsLonKJF35a1yB/U6JRxD9VmQbEnd/YvcSZldKjxHc103OQv8f34olFUXl430Sm9gfiVc+4H8Sf2bV3sZ9ERjn2M+feJcR/NNYU8TysizjxuQyJENlS/XuJT29X1RFlJYZ6sP58v2XEHeuZyGuRtxvyuqRLGTpp6hMMJha22mzDPpzcJZD/EC2s17Rlz2Winie3EHFR374qYsCtHOw3JXPYleh7wd6MuFHXv4ko5R3yjDh2JaiNuIbRXoR8xe4YIQoKsNcQW9svsPC8biHiycG5+CziYKWB/H1kDyOexZNWL4ldQ5Y5qIfq5Ctg58pQxMvudipRPHlFJVFJRMiW6Bcu7EH8VmbAR3yv2LQLut7uh/OvDOUMwzm8RL2hC6NsxLm3XTaZ+GuBLr5fGMSg8uYwtW3FOj90G1GnyQqhqMO9ilNBeE9byAbiH6eU2ETRRdM4Z6n+JOrOvSEP+VU72AB93WUIol52Ko3i+/lhtgyif6euClH48wD0EurkZo26VXwtTOTK1YCfPItbj3zJPA2FTkUnZuG9rGZl6I/tZDKPeJ63JwXxC7bG+bQ3yEKXXE5f4RMe1fm80I2OF3Tem2CvSHylNgtx9tOQTSJ++dqFfZ0QCsH6QivdThBVHlw/hPcItuwn6py5/wX59vXjR920910k3lAVfoznXj/DOXxTx0qJ6pKrUUcyz2emiOXqDYaIs98ixEdtfB+e70gsaSROruDGOtVzOeCvo8Y+fyPvop5z8VwiE34WNUcL59nOqfwGvsCxSxV6cVRAXqJXSdsQHwUwEP8ClijyqJ5g9h31bHwqAfG40QCfi1cyQ52Epuq4E9u9Y47AJ0wlPInTbB/4an/9F8QjI2tKEHExkF6Pcz+ZWQ4fLjSHj7nZPx8kbvZrR7x6lPqXEL3HG1HfYoWZ8K3yOQ0FRAev4qfwEUXLB8R9uTmIR7jRF/jIcFcb6kTl8g74XMKcnHDs0+c++oi7gPsY8Q6DnUncOrkZ/aP4oC18NPthHvpS3VFxKWLEios4X/oAXwvyUM/E/nPrgxcQkzxOSxLnysmjbkOmuqFDkdDU9/BzmzYn4mK1QNRnzIGMYuIhcxOcw6YhGOs3Wk1jXUdZrqXwkRci0B2rqhT+d9zew4IoL/4R/sIldxx9jTXOsYd4K6vUhChXlYd6dWSIIU+sg+4T6FMyP9F3Gv9ZAF+4V55xh2iyoOQz8qso4YbzcpysIFqJ7sH5nVzOQs88Qb3ofxY+H7DP2QttUDfT2rLq6PNeM/CBzCu70a8Cy4rhs+9UTr1AP1xpvJKoIP3rJDF1VOst/E/pCd7H7+GDvqrEY431/XNb4E+RN33gO/OPOWvAD61k4OfZHFc1ievLFqJuxzrkEMfNDhPoK8wt5ejPA2e/IT/pB/wwP7h1NiGuahXnbhErokXPw78ql6Pf5i9aAl/bayT3jfj9yWrUzQfWXMwXkoX5IaiPV5sWIw75wkex3yOj8JMjTWKor8R82cPwI/2qFfCxpCTUx9uP3fh+iKEKfdi8+bQa+/WKd4YPVg5CV5/OyF/Hc5Z+1URFjrt4Tn+gEuc8vNgIdRNzbSnifzRRHe/vMnVAnGddNYQerl18ijyylIb/QB1OTisQpY/6CSB/PUz0OQsbzQborjsUfuElGxlA3NLQif053KmAr0yGy8OHo/iVM4jGKc2Y38JNTdCXt+yKk4M/2lWgntr0diN/+S/r9xHrqxnwc1meZJzrhL8/zqk+Jwr9NEHgFZ6LqTsO/+uwkIfvrufMhE9lVaakE1cY60J/7ZWxqG+m1i0d1Nv2StRLjO0hzGO+YsGYs4TchuBLF40vdxMbQk/i/F4Fp9HP9S7ewPlioj+innze9aPfjwlwo/9fsDkEXToLzIUvznZiQC9WUVWYPwy9mqALHWUWfOnH6zLMfz2fLsFnHiTuW4T4RxdDh106LvDDxFFr9Eud4yfhuz9uj2MeS9z4C3pTDBpCvM2/6+E5/q2vUY+Cwo/xnGBxKvpZR3kt5p3TtY6Ia5/YXvhFnHoz9v0mcA10sTF5LeIqzBzDfD4skgL/9HzcnUjcbyMEX6lZG4G8Xk3f34q++3AMc1JooRDyx+Fjj3lRr8ThKnRQfR39MCHxBt5/2FUA/lMqYghf320rCV37KVxqhu/WlsAvP3j4oo8MpnoshF+E6OcRW6ovb4IuuzNw7iZ2HvLySbcXPpM0Lxh9YvappZgjrtw7CP26bNaALlv/dkB+LQ2r0YcMGwXg35LD7+AbOs5ZXcTaqVzH376UhT4X16iF3/cmBx4jnnzvinmEq0heF3E7HCqGe0U8xi4OIZ73N1EXeizMeeZFqsh7x6YM/L2szwTm2NbrU/C31l9vrhFfTjVgHvm22GIz+hKnCOKs7WYPX+idmYv64721yAG+xqkAn2EJaUI3TfHCmLdztPeg3vZ6F7/G/LrBAfOVhFsO7geJWs64f7yQYCMug/F88Du2xjB8VFhqMJKoVclA/i/m+OLeVaWx4RR83+NBHNFg4CfmCS9727TfftsJvUrPfo710kr4ZojBJttRj+GZObK4r/kU43NZ/3OsExeWjnpg9O/HXDpRwMa5GfvjAjEPvm7Zijj5mZ/BOgFPoQsT1Q7opSbhG+Yk7spviGu9FifmI8VJQ+htlp3c7/pPfYt5tu5d7Cv035MymJtNnQ+i31xWWY86a+T+iP6UmZ7hgjkg2xzzmJVnNXxSdWss3mM+JoO52mB+InRc0lcA35o/eU6LaPTvOdyzsm1L4C+RdSr6qHu1I/CPNOUAzGvWKsHwqQQFD+jydhLbHvOK8wTyvYqVDr/TjEzDfFDo14IrtZnTNOq2wswIc8x4SC/606SVOXxrOzMV+xG30lQjLvc/Bp0q9V1AX1/amoX3vPLvx31ztuabccxtelqoh59/WcNnis4VwEccdpxBHzywd/Qn7gFBM/BPHuld2NcHr1rcTwT1e54jzvbzCuGPSwfgj156IxHo8+IiqOfcCvdooi3TEXOqdxIf4pofpAof2W++FXlpXhaK90lZn8HcWF/3LB+6lTqPOHwO88d8M107hfvWizF91EtAvBbul7K/oqCXpvTpc1j3r9WI+8i1KPhaumsb9su0jEJ9a98Xv4H3qTGhL3FXfvirXEkp/HzLuCh89FKnK+6POlHL4PtHWDJ4X7R5GPrRjx0ByFv4VDbmjtoWQ9z/JoujcG8f0ypAX+DKKMdcYCHVAgOplJrAXGhxKAh+K7FnGPldzQ7D3Nsex4berkqeQ13qjuyEH7xtioWPRstb4L7w4LxkO3zEPhu+ZLQ1AJ/f3WLgHjfC64Q+8LemHs63T2wQc6RYvgzqx2JG0wv3CB025tOdFZL4fKLFEvfb+jVlxoh7Ywd87NijF9jvyN1l6NseeaW457zPi8acZtbdsBO+wqmMueR2kQb8N2ztCHzdc/r3ecWdd83HvcjlCvTcZyuC88UFuuK+U+PAjfwvPhWB+b8zXhL/32CuKsZnuc99+P6WKi/uJ9LG2+CLLR4s+Laa1uVZ0G+FBfwsu+8m9OG/LBt9L8PADf5vn2aHeNWJymAdEfMO6DPK3w33K/9ES9SLB48qdJ4yMYl6GeYeQR6YEdPwmVeGXPh7+bXH8PuaNFP4wM2Aftwn5ROKoNvIsTLcT9Z+tYEvRXhuhK6enW6FTpViz0JHK2J3o99VKEtgHl4TG7ubqLxOGHOldONH+HbkyDj8Q34jN4vj//j5DzkO7ss="
                    ),
                    "drawn": True,
                },
                "skip": [],
            },
            "finished": False,
            "base_seed": 3325388913236545215,
            "drew_base_seed": True,
            "loader_rng": None,
            "sampler_state": None,
            "global_rng": _state(
                "eNqVmPk/lWsXxg2VMZ2KnTkdJKTxOM2IlMIhQzJUshFSEjmFBjShkjLPtGUKKSFzUjQgpQw7kbmSKEMyve+6ev+B1y/fz7Y993Pfa13rWusmwPH7x4WLg4Pzv+T63+ccftWHxEBzCSuizVHn+8TRjXariKd1GiyJuwIc+ohVJ7fguRenhGYT98RfeULkTS77RCzr0hInPvE64U/coLj8ANEttFGZyHgos534QTSJh6jrPOVInNMaYEQUWxcRS6zhzJImXkrZbU68P7H7L2JC3ecLxDNvazuIB783cGOfrbz/EOuE2n5h/04/lYhDd2rkiV5/bMZ+8lnlTGKcteFXYqyRdhqRU0nuNvHsEnsZfJbgLSE+H0waIEYvd8X7B18KPyJ6rhsSJT4s4rcjvjHLjiFWvjWYJDYv5M0i8rU3nSbay8r4Ee2aC7H+LMF12sQenaP9xHgHt06io9OzYeJX25F/iZrGQ38S7277OkTsHXtUTzxmI4Y43bebh3P/4+2IxGQUdvsSj3+ePo71Nl3DfvsLonKJF35a1yB/U6JRxD9VmQbEnd/YvcSZldKjxHc103OQv8f34olFUXl430Sm9gfiVc+4H8Sf2bV3sZ9ERjn2M+feJcR/NNYU8TysizjxuQyJENlS/XuJT29X1RFlJYZ6sP58v2XEHeuZyGuRtxvyuqRLGTpp6hMMJha22mzDPpzcJZD/EC2s17Rlz2Winie3EHFR374qYsCtHOw3JXPYleh7wd6MuFHXv4ko5R3yjDh2JaiNuIbRXoR8xe4YIQoKsNcQW9svsPC8biHiycG5+CziYKWB/H1kDyOexZNWL4ldQ5Y5qIfq5Ctg58pQxMvudipRPHlFJVFJRMiW6Bcu7EH8VmbAR3yv2LQLut7uh/OvDOUMwzm8RL2hC6NsxLm3XTaZ+GuBLr5fGMSg8uYwtW3FOj90G1GnyQqhqMO9ilNBeE9byAbiH6eU2ETRRdM4Z6n+JOrOvSEP+VU72AB93WUIol52Ko3i+/lhtgyif6euClH48wD0EurkZo26VXwtTOTK1YCfPItbj3zJPA2FTkUnZuG9rGZl6I/tZDKPeJ63JwXxC7bG+bQ3yEKXXE5f4RMe1fm80I2OF3Tem2CvSHylNgtx9tOQTSJ++dqFfZ0QCsH6QivdThBVHlw/hPcItuwn6py5/wX59vXjR920910k3lAVfoznXj/DOXxTx0qJ6pKrUUcyz2emiOXqDYaIs98ixEdtfB+e70gsaSROruDGOtVzOeCvo8Y+fyPvop5z8VwiE34WNUcL59nOqfwGvsCxSxV6cVRAXqJXSdsQHwUwEP8ClijyqJ5g9h31bHwqAfG40QCfi1cyQ52Epuq4E9u9Y47AJ0wlPInTbB/4an/9F8QjI2tKEHExkF6Pcz+ZWQ4fLjSHj7nZPx8kbvZrR7x6lPqXEL3HG1HfYoWZ8K3yOQ0FRAev4qfwEUXLB8R9uTmIR7jRF/jIcFcb6kTl8g74XMKcnHDs0+c++oi7gPsY8Q6DnUncOrkZ/aP4oC18NPthHvpS3VFxKWLEios4X/oAXwvyUM/E/nPrgxcQkzxOSxLnysmjbkOmuqFDkdDU9/BzmzYn4mK1QNRnzIGMYuIhcxOcw6YhGOs3Wk1jXUdZrqXwkRci0B2rqhT+d9zew4IoL/4R/sIldxx9jTXOsYd4K6vUhChXlYd6dWSIIU+sg+4T6FMyP9F3Gv9ZAF+4V55xh2iyoOQz8qso4YbzcpysIFqJ7sH5nVzOQs88Qb3ofxY+H7DP2QttUDfT2rLq6PNeM/CBzCu70a8Cy4rhs+9UTr1AP1xpvJKoIP3rJDF1VOst/E/pCd7H7+GDvqrEY431/XNb4E+RN33gO/OPOWvAD61k4OfZHFc1ievLFqJuxzrkEMfNDhPoK8wt5ejPA2e/IT/pB/wwP7h1NiGuahXnbhErokXPw78ql6Pf5i9aAl/bayT3jfj9yWrUzQfWXMwXkoX5IaiPV5sWIw75wkex3yOj8JMjTWKor8R82cPwI/2qFfCxpCTUx9uP3fh+iKEKfdi8+bQa+/WKd4YPVg5CV5/OyF/Hc5Z+1URFjrt4Tn+gEuc8vNgIdRNzbSnifzRRHe/vMnVAnGddNYQerl18ijyylIb/QB1OTisQpY/6CSB/PUz0OQsbzQborjsUfuElGxlA3NLQif053KmAr0yGy8OHo/iVM4jGKc2Y38JNTdCXt+yKk4M/2lWgntr0diN/+S/r9xHrqxnwc1meZJzrhL8/zqk+Jwr9NEHgFZ6LqTsO/+uwkIfvrufMhE9lVaakE1cY60J/7ZWxqG+m1i0d1Nv2StRLjO0hzGO+YsGYs4TchuBLF40vdxMbQk/i/F4Fp9HP9S7ewPlioj+innze9aPfjwlwo/9fsDkEXToLzIUvznZiQC9WUVWYPwy9mqALHWUWfOnH6zLMfz2fLsFnHiTuW4T4RxdDh106LvDDxFFr9Eud4yfhuz9uj2MeS9z4C3pTDBpCvM2/6+E5/q2vUY+Cwo/xnGBxKvpZR3kt5p3TtY6Ia5/YXvhFnHoz9v0mcA10sTF5LeIqzBzDfD4skgL/9HzcnUjcbyMEX6lZG4G8Xk3f34q++3AMc1JooRDyx+Fjj3lRr8ThKnRQfR39MCHxBt5/2FUA/lMqYghf320rCV37KVxqhu/WlsAvP3j4oo8MpnoshF+E6OcRW6ovb4IuuzNw7iZ2HvLySbcXPpM0Lxh9YvappZgjrtw7CP26bNaALlv/dkB+LQ2r0YcMGwXg35LD7+AbOs5ZXcTaqVzH376UhT4X16iF3/cmBx4jnnzvinmEq0heF3E7HCqGe0U8xi4OIZ73N1EXeizMeeZFqsh7x6YM/L2szwTm2NbrU/C31l9vrhFfTjVgHvm22GIz+hKnCOKs7WYPX+idmYv64721yAG+xqkAn2EJaUI3TfHCmLdztPeg3vZ6F7/G/LrBAfOVhFsO7geJWs64f7yQYCMug/F88Du2xjB8VFhqMJKoVclA/i/m+OLeVaWx4RR83+NBHNFg4CfmCS9727TfftsJvUrPfo710kr4ZojBJttRj+GZObK4r/kU43NZ/3OsExeWjnpg9O/HXDpRwMa5GfvjAjEPvm7Zijj5mZ/BOgFPoQsT1Q7opSbhG+Yk7spviGu9FifmI8VJQ+htlp3c7/pPfYt5tu5d7Cv035MymJtNnQ+i31xWWY86a+T+iP6UmZ7hgjkg2xzzmJVnNXxSdWss3mM+JoO52mB+InRc0lcA35o/eU6LaPTvOdyzsm1L4C+RdSr6qHu1I/CPNOUAzGvWKsHwqQQFD+jydhLbHvOK8wTyvYqVDr/TjEzDfFDo14IrtZnTNOq2wswIc8x4SC/606SVOXxrOzMV+xG30lQjLvc/Bp0q9V1AX1/amoX3vPLvx31ztuabccxtelqoh59/WcNnis4VwEccdpxBHzywd/Qn7gFBM/BPHuld2NcHr1rcTwT1e54jzvbzCuGPSwfgj156IxHo8+IiqOfcCvdooi3TEXOqdxIf4pofpAof2W++FXlpXhaK90lZn8HcWF/3LB+6lTqPOHwO88d8M107hfvWizF91EtAvBbul7K/oqCXpvTpc1j3r9WI+8i1KPhaumsb9su0jEJ9a98Xv4H3qTGhL3FXfvirXEkp/HzLuCh89FKnK+6POlHL4PtHWDJ4X7R5GPrRjx0ByFv4VDbmjtoWQ9z/JoujcG8f0ypAX+DKKMdcYCHVAgOplJrAXGhxKAh+K7FnGPldzQ7D3Nsex4berkqeQ13qjuyEH7xtioWPRstb4L7w4LxkO3zEPhu+ZLQ1AJ/f3WLgHjfC64Q+8LemHs63T2wQc6RYvgzqx2JG0wv3CB025tOdFZL4fKLFEvfb+jVlxoh7Ywd87NijF9jvyN1l6NseeaW457zPi8acZtbdsBO+wqmMueR2kQb8N2ztCHzdc/r3ecWdd83HvcjlCvTcZyuC88UFuuK+U+PAjfwvPhWB+b8zXhL/32CuKsZnuc99+P6WKi/uJ9LG2+CLLR4s+Laa1uVZ0G+FBfwsu+8m9OG/LBt9L8PADf5vn2aHeNWJymAdEfMO6DPK3w33K/9ES9SLB48qdJ4yMYl6GeYeQR6YEdPwmVeGXPh7+bXH8PuaNFP4wM2Aftwn5ROKoNvIsTLcT9Z+tYEvRXhuhK6enW6FTpViz0JHK2J3o99VKEtgHl4TG7ubqLxOGHOldONH+HbkyDj8Q34jN4vj//j5DzkO7ss="
            ),
        },
        "got": [
            [0, 1, 2],
            [3, 4, 5],
        ],
        "rest": [
            [6, 7, 8],
            [9, 10, 11],
            [12, 13, 14],
            [15, 16, 17],
            [18, 19],
        ],
        "next": [
            [0, 1, 2],
            [3, 4, 5],
            [6, 7, 8],
            [9, 10, 11],
            [12, 13, 14],
            [15, 16, 17],
            [18, 19],
        ],
    },
    "finished": {
        "state": {
            "format": "torch_threadloader/state-1",
            "config": {
                "kind": Kind.MAP,
                "batch_size": 4,
                "drop_last": False,
                "sampler": "SequentialSampler",
                "batch_sampler": "BatchSampler",
                "batches": 3,
                "samples": 10,
                "generator": False,
                "sampler_generator": False,
                "order": {
                    "type": "sequential",
                    "length": 10,
                },
            },
            "finished": True,
            "generators": {
                "loader": None,
                "sampler": None,
            },
            "rng": _state(
                "eNqVmPk/lWsXxg2VMZ2KnTkdJKTxOM2IlMIhQzJUshFSEjmFBjShkjLPtGUKKSFzUjQgpQw7kbmSKEMyve+6ev+B1y/fz7Y993Pfa13rWusmwPH7x4WLg4Pzv+T63+ccftWHxEBzCSuizVHn+8TRjXariKd1GiyJuwIc+ohVJ7fguRenhGYT98RfeULkTS77RCzr0hInPvE64U/coLj8ANEttFGZyHgos534QTSJh6jrPOVInNMaYEQUWxcRS6zhzJImXkrZbU68P7H7L2JC3ecLxDNvazuIB783cGOfrbz/EOuE2n5h/04/lYhDd2rkiV5/bMZ+8lnlTGKcteFXYqyRdhqRU0nuNvHsEnsZfJbgLSE+H0waIEYvd8X7B18KPyJ6rhsSJT4s4rcjvjHLjiFWvjWYJDYv5M0i8rU3nSbay8r4Ee2aC7H+LMF12sQenaP9xHgHt06io9OzYeJX25F/iZrGQ38S7277OkTsHXtUTzxmI4Y43bebh3P/4+2IxGQUdvsSj3+ePo71Nl3DfvsLonKJF35a1yB/U6JRxD9VmQbEnd/YvcSZldKjxHc103OQv8f34olFUXl430Sm9gfiVc+4H8Sf2bV3sZ9ERjn2M+feJcR/NNYU8TysizjxuQyJENlS/XuJT29X1RFlJYZ6sP58v2XEHeuZyGuRtxvyuqRLGTpp6hMMJha22mzDPpzcJZD/EC2s17Rlz2Winie3EHFR374qYsCtHOw3JXPYleh7wd6MuFHXv4ko5R3yjDh2JaiNuIbRXoR8xe4YIQoKsNcQW9svsPC8biHiycG5+CziYKWB/H1kDyOexZNWL4ldQ5Y5qIfq5Ctg58pQxMvudipRPHlFJVFJRMiW6Bcu7EH8VmbAR3yv2LQLut7uh/OvDOUMwzm8RL2hC6NsxLm3XTaZ+GuBLr5fGMSg8uYwtW3FOj90G1GnyQqhqMO9ilNBeE9byAbiH6eU2ETRRdM4Z6n+JOrOvSEP+VU72AB93WUIol52Ko3i+/lhtgyif6euClH48wD0EurkZo26VXwtTOTK1YCfPItbj3zJPA2FTkUnZuG9rGZl6I/tZDKPeJ63JwXxC7bG+bQ3yEKXXE5f4RMe1fm80I2OF3Tem2CvSHylNgtx9tOQTSJ++dqFfZ0QCsH6QivdThBVHlw/hPcItuwn6py5/wX59vXjR920910k3lAVfoznXj/DOXxTx0qJ6pKrUUcyz2emiOXqDYaIs98ixEdtfB+e70gsaSROruDGOtVzOeCvo8Y+fyPvop5z8VwiE34WNUcL59nOqfwGvsCxSxV6cVRAXqJXSdsQHwUwEP8ClijyqJ5g9h31bHwqAfG40QCfi1cyQ52Epuq4E9u9Y47AJ0wlPInTbB/4an/9F8QjI2tKEHExkF6Pcz+ZWQ4fLjSHj7nZPx8kbvZrR7x6lPqXEL3HG1HfYoWZ8K3yOQ0FRAev4qfwEUXLB8R9uTmIR7jRF/jIcFcb6kTl8g74XMKcnHDs0+c++oi7gPsY8Q6DnUncOrkZ/aP4oC18NPthHvpS3VFxKWLEios4X/oAXwvyUM/E/nPrgxcQkzxOSxLnysmjbkOmuqFDkdDU9/BzmzYn4mK1QNRnzIGMYuIhcxOcw6YhGOs3Wk1jXUdZrqXwkRci0B2rqhT+d9zew4IoL/4R/sIldxx9jTXOsYd4K6vUhChXlYd6dWSIIU+sg+4T6FMyP9F3Gv9ZAF+4V55xh2iyoOQz8qso4YbzcpysIFqJ7sH5nVzOQs88Qb3ofxY+H7DP2QttUDfT2rLq6PNeM/CBzCu70a8Cy4rhs+9UTr1AP1xpvJKoIP3rJDF1VOst/E/pCd7H7+GDvqrEY431/XNb4E+RN33gO/OPOWvAD61k4OfZHFc1ievLFqJuxzrkEMfNDhPoK8wt5ejPA2e/IT/pB/wwP7h1NiGuahXnbhErokXPw78ql6Pf5i9aAl/bayT3jfj9yWrUzQfWXMwXkoX5IaiPV5sWIw75wkex3yOj8JMjTWKor8R82cPwI/2qFfCxpCTUx9uP3fh+iKEKfdi8+bQa+/WKd4YPVg5CV5/OyF/Hc5Z+1URFjrt4Tn+gEuc8vNgIdRNzbSnifzRRHe/vMnVAnGddNYQerl18ijyylIb/QB1OTisQpY/6CSB/PUz0OQsbzQborjsUfuElGxlA3NLQif053KmAr0yGy8OHo/iVM4jGKc2Y38JNTdCXt+yKk4M/2lWgntr0diN/+S/r9xHrqxnwc1meZJzrhL8/zqk+Jwr9NEHgFZ6LqTsO/+uwkIfvrufMhE9lVaakE1cY60J/7ZWxqG+m1i0d1Nv2StRLjO0hzGO+YsGYs4TchuBLF40vdxMbQk/i/F4Fp9HP9S7ewPlioj+innze9aPfjwlwo/9fsDkEXToLzIUvznZiQC9WUVWYPwy9mqALHWUWfOnH6zLMfz2fLsFnHiTuW4T4RxdDh106LvDDxFFr9Eud4yfhuz9uj2MeS9z4C3pTDBpCvM2/6+E5/q2vUY+Cwo/xnGBxKvpZR3kt5p3TtY6Ia5/YXvhFnHoz9v0mcA10sTF5LeIqzBzDfD4skgL/9HzcnUjcbyMEX6lZG4G8Xk3f34q++3AMc1JooRDyx+Fjj3lRr8ThKnRQfR39MCHxBt5/2FUA/lMqYghf320rCV37KVxqhu/WlsAvP3j4oo8MpnoshF+E6OcRW6ovb4IuuzNw7iZ2HvLySbcXPpM0Lxh9YvappZgjrtw7CP26bNaALlv/dkB+LQ2r0YcMGwXg35LD7+AbOs5ZXcTaqVzH376UhT4X16iF3/cmBx4jnnzvinmEq0heF3E7HCqGe0U8xi4OIZ73N1EXeizMeeZFqsh7x6YM/L2szwTm2NbrU/C31l9vrhFfTjVgHvm22GIz+hKnCOKs7WYPX+idmYv64721yAG+xqkAn2EJaUI3TfHCmLdztPeg3vZ6F7/G/LrBAfOVhFsO7geJWs64f7yQYCMug/F88Du2xjB8VFhqMJKoVclA/i/m+OLeVaWx4RR83+NBHNFg4CfmCS9727TfftsJvUrPfo710kr4ZojBJttRj+GZObK4r/kU43NZ/3OsExeWjnpg9O/HXDpRwMa5GfvjAjEPvm7Zijj5mZ/BOgFPoQsT1Q7opSbhG+Yk7spviGu9FifmI8VJQ+htlp3c7/pPfYt5tu5d7Cv035MymJtNnQ+i31xWWY86a+T+iP6UmZ7hgjkg2xzzmJVnNXxSdWss3mM+JoO52mB+InRc0lcA35o/eU6LaPTvOdyzsm1L4C+RdSr6qHu1I/CPNOUAzGvWKsHwqQQFD+jydhLbHvOK8wTyvYqVDr/TjEzDfFDo14IrtZnTNOq2wswIc8x4SC/606SVOXxrOzMV+xG30lQjLvc/Bp0q9V1AX1/amoX3vPLvx31ztuabccxtelqoh59/WcNnis4VwEccdpxBHzywd/Qn7gFBM/BPHuld2NcHr1rcTwT1e54jzvbzCuGPSwfgj156IxHo8+IiqOfcCvdooi3TEXOqdxIf4pofpAof2W++FXlpXhaK90lZn8HcWF/3LB+6lTqPOHwO88d8M107hfvWizF91EtAvBbul7K/oqCXpvTpc1j3r9WI+8i1KPhaumsb9su0jEJ9a98Xv4H3qTGhL3FXfvirXEkp/HzLuCh89FKnK+6POlHL4PtHWDJ4X7R5GPrRjx0ByFv4VDbmjtoWQ9z/JoujcG8f0ypAX+DKKMdcYCHVAgOplJrAXGhxKAh+K7FnGPldzQ7D3Nsex4berkqeQ13qjuyEH7xtioWPRstb4L7w4LxkO3zEPhu+ZLQ1AJ/f3WLgHjfC64Q+8LemHs63T2wQc6RYvgzqx2JG0wv3CB025tOdFZL4fKLFEvfb+jVlxoh7Ywd87NijF9jvyN1l6NseeaW457zPi8acZtbdsBO+wqmMueR2kQb8N2ztCHzdc/r3ecWdd83HvcjlCvTcZyuC88UFuuK+U+PAjfwvPhWB+b8zXhL/32CuKsZnuc99+P6WKi/uJ9LG2+CLLR4s+Laa1uVZ0G+FBfwsu+8m9OG/LBt9L8PADf5vn2aHeNWJymAdEfMO6DPK3w33K/9ES9SLB48qdJ4yMYl6GeYeQR6YEdPwmVeGXPh7+bXH8PuaNFP4wM2Aftwn5ROKoNvIsTLcT9Z+tYEvRXhuhK6enW6FTpViz0JHK2J3o99VKEtgHl4TG7ubqLxOGHOldONH+HbkyDj8Q34jN4vj//j5DzkO7ss="
            ),
            "global_rng": _state(
                "eNqVmPk/lWsXxg2VMZ2KnTkdJKTxOM2IlMIhQzJUshFSEjmFBjShkjLPtGUKKSFzUjQgpQw7kbmSKEMyve+6ev+B1y/fz7Y993Pfa13rWusmwPH7x4WLg4Pzv+T63+ccftWHxEBzCSuizVHn+8TRjXariKd1GiyJuwIc+ohVJ7fguRenhGYT98RfeULkTS77RCzr0hInPvE64U/coLj8ANEttFGZyHgos534QTSJh6jrPOVInNMaYEQUWxcRS6zhzJImXkrZbU68P7H7L2JC3ecLxDNvazuIB783cGOfrbz/EOuE2n5h/04/lYhDd2rkiV5/bMZ+8lnlTGKcteFXYqyRdhqRU0nuNvHsEnsZfJbgLSE+H0waIEYvd8X7B18KPyJ6rhsSJT4s4rcjvjHLjiFWvjWYJDYv5M0i8rU3nSbay8r4Ee2aC7H+LMF12sQenaP9xHgHt06io9OzYeJX25F/iZrGQ38S7277OkTsHXtUTzxmI4Y43bebh3P/4+2IxGQUdvsSj3+ePo71Nl3DfvsLonKJF35a1yB/U6JRxD9VmQbEnd/YvcSZldKjxHc103OQv8f34olFUXl430Sm9gfiVc+4H8Sf2bV3sZ9ERjn2M+feJcR/NNYU8TysizjxuQyJENlS/XuJT29X1RFlJYZ6sP58v2XEHeuZyGuRtxvyuqRLGTpp6hMMJha22mzDPpzcJZD/EC2s17Rlz2Winie3EHFR374qYsCtHOw3JXPYleh7wd6MuFHXv4ko5R3yjDh2JaiNuIbRXoR8xe4YIQoKsNcQW9svsPC8biHiycG5+CziYKWB/H1kDyOexZNWL4ldQ5Y5qIfq5Ctg58pQxMvudipRPHlFJVFJRMiW6Bcu7EH8VmbAR3yv2LQLut7uh/OvDOUMwzm8RL2hC6NsxLm3XTaZ+GuBLr5fGMSg8uYwtW3FOj90G1GnyQqhqMO9ilNBeE9byAbiH6eU2ETRRdM4Z6n+JOrOvSEP+VU72AB93WUIol52Ko3i+/lhtgyif6euClH48wD0EurkZo26VXwtTOTK1YCfPItbj3zJPA2FTkUnZuG9rGZl6I/tZDKPeJ63JwXxC7bG+bQ3yEKXXE5f4RMe1fm80I2OF3Tem2CvSHylNgtx9tOQTSJ++dqFfZ0QCsH6QivdThBVHlw/hPcItuwn6py5/wX59vXjR920910k3lAVfoznXj/DOXxTx0qJ6pKrUUcyz2emiOXqDYaIs98ixEdtfB+e70gsaSROruDGOtVzOeCvo8Y+fyPvop5z8VwiE34WNUcL59nOqfwGvsCxSxV6cVRAXqJXSdsQHwUwEP8ClijyqJ5g9h31bHwqAfG40QCfi1cyQ52Epuq4E9u9Y47AJ0wlPInTbB/4an/9F8QjI2tKEHExkF6Pcz+ZWQ4fLjSHj7nZPx8kbvZrR7x6lPqXEL3HG1HfYoWZ8K3yOQ0FRAev4qfwEUXLB8R9uTmIR7jRF/jIcFcb6kTl8g74XMKcnHDs0+c++oi7gPsY8Q6DnUncOrkZ/aP4oC18NPthHvpS3VFxKWLEios4X/oAXwvyUM/E/nPrgxcQkzxOSxLnysmjbkOmuqFDkdDU9/BzmzYn4mK1QNRnzIGMYuIhcxOcw6YhGOs3Wk1jXUdZrqXwkRci0B2rqhT+d9zew4IoL/4R/sIldxx9jTXOsYd4K6vUhChXlYd6dWSIIU+sg+4T6FMyP9F3Gv9ZAF+4V55xh2iyoOQz8qso4YbzcpysIFqJ7sH5nVzOQs88Qb3ofxY+H7DP2QttUDfT2rLq6PNeM/CBzCu70a8Cy4rhs+9UTr1AP1xpvJKoIP3rJDF1VOst/E/pCd7H7+GDvqrEY431/XNb4E+RN33gO/OPOWvAD61k4OfZHFc1ievLFqJuxzrkEMfNDhPoK8wt5ejPA2e/IT/pB/wwP7h1NiGuahXnbhErokXPw78ql6Pf5i9aAl/bayT3jfj9yWrUzQfWXMwXkoX5IaiPV5sWIw75wkex3yOj8JMjTWKor8R82cPwI/2qFfCxpCTUx9uP3fh+iKEKfdi8+bQa+/WKd4YPVg5CV5/OyF/Hc5Z+1URFjrt4Tn+gEuc8vNgIdRNzbSnifzRRHe/vMnVAnGddNYQerl18ijyylIb/QB1OTisQpY/6CSB/PUz0OQsbzQborjsUfuElGxlA3NLQif053KmAr0yGy8OHo/iVM4jGKc2Y38JNTdCXt+yKk4M/2lWgntr0diN/+S/r9xHrqxnwc1meZJzrhL8/zqk+Jwr9NEHgFZ6LqTsO/+uwkIfvrufMhE9lVaakE1cY60J/7ZWxqG+m1i0d1Nv2StRLjO0hzGO+YsGYs4TchuBLF40vdxMbQk/i/F4Fp9HP9S7ewPlioj+innze9aPfjwlwo/9fsDkEXToLzIUvznZiQC9WUVWYPwy9mqALHWUWfOnH6zLMfz2fLsFnHiTuW4T4RxdDh106LvDDxFFr9Eud4yfhuz9uj2MeS9z4C3pTDBpCvM2/6+E5/q2vUY+Cwo/xnGBxKvpZR3kt5p3TtY6Ia5/YXvhFnHoz9v0mcA10sTF5LeIqzBzDfD4skgL/9HzcnUjcbyMEX6lZG4G8Xk3f34q++3AMc1JooRDyx+Fjj3lRr8ThKnRQfR39MCHxBt5/2FUA/lMqYghf320rCV37KVxqhu/WlsAvP3j4oo8MpnoshF+E6OcRW6ovb4IuuzNw7iZ2HvLySbcXPpM0Lxh9YvappZgjrtw7CP26bNaALlv/dkB+LQ2r0YcMGwXg35LD7+AbOs5ZXcTaqVzH376UhT4X16iF3/cmBx4jnnzvinmEq0heF3E7HCqGe0U8xi4OIZ73N1EXeizMeeZFqsh7x6YM/L2szwTm2NbrU/C31l9vrhFfTjVgHvm22GIz+hKnCOKs7WYPX+idmYv64721yAG+xqkAn2EJaUI3TfHCmLdztPeg3vZ6F7/G/LrBAfOVhFsO7geJWs64f7yQYCMug/F88Du2xjB8VFhqMJKoVclA/i/m+OLeVaWx4RR83+NBHNFg4CfmCS9727TfftsJvUrPfo710kr4ZojBJttRj+GZObK4r/kU43NZ/3OsExeWjnpg9O/HXDpRwMa5GfvjAjEPvm7Zijj5mZ/BOgFPoQsT1Q7opSbhG+Yk7spviGu9FifmI8VJQ+htlp3c7/pPfYt5tu5d7Cv035MymJtNnQ+i31xWWY86a+T+iP6UmZ7hgjkg2xzzmJVnNXxSdWss3mM+JoO52mB+InRc0lcA35o/eU6LaPTvOdyzsm1L4C+RdSr6qHu1I/CPNOUAzGvWKsHwqQQFD+jydhLbHvOK8wTyvYqVDr/TjEzDfFDo14IrtZnTNOq2wswIc8x4SC/606SVOXxrOzMV+xG30lQjLvc/Bp0q9V1AX1/amoX3vPLvx31ztuabccxtelqoh59/WcNnis4VwEccdpxBHzywd/Qn7gFBM/BPHuld2NcHr1rcTwT1e54jzvbzCuGPSwfgj156IxHo8+IiqOfcCvdooi3TEXOqdxIf4pofpAof2W++FXlpXhaK90lZn8HcWF/3LB+6lTqPOHwO88d8M107hfvWizF91EtAvBbul7K/oqCXpvTpc1j3r9WI+8i1KPhaumsb9su0jEJ9a98Xv4H3qTGhL3FXfvirXEkp/HzLuCh89FKnK+6POlHL4PtHWDJ4X7R5GPrRjx0ByFv4VDbmjtoWQ9z/JoujcG8f0ypAX+DKKMdcYCHVAgOplJrAXGhxKAh+K7FnGPldzQ7D3Nsex4berkqeQ13qjuyEH7xtioWPRstb4L7w4LxkO3zEPhu+ZLQ1AJ/f3WLgHjfC64Q+8LemHs63T2wQc6RYvgzqx2JG0wv3CB025tOdFZL4fKLFEvfb+jVlxoh7Ywd87NijF9jvyN1l6NseeaW457zPi8acZtbdsBO+wqmMueR2kQb8N2ztCHzdc/r3ecWdd83HvcjlCvTcZyuC88UFuuK+U+PAjfwvPhWB+b8zXhL/32CuKsZnuc99+P6WKi/uJ9LG2+CLLR4s+Laa1uVZ0G+FBfwsu+8m9OG/LBt9L8PADf5vn2aHeNWJymAdEfMO6DPK3w33K/9ES9SLB48qdJ4yMYl6GeYeQR6YEdPwmVeGXPh7+bXH8PuaNFP4wM2Aftwn5ROKoNvIsTLcT9Z+tYEvRXhuhK6enW6FTpViz0JHK2J3o99VKEtgHl4TG7ubqLxOGHOldONH+HbkyDj8Q34jN4vj//j5DzkO7ss="
            ),
        },
        "got": [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
            [8, 9],
        ],
        "rest": [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
            [8, 9],
        ],
        "next": [
            [0, 1, 2, 3],
            [4, 5, 6, 7],
            [8, 9],
        ],
    },
}
