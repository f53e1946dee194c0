# flashserve container image: the `flashserve` server (and the `flashserve-chat` client), built
# in one stage and copied into a slim runtime stage that holds only the shared libraries the
# binaries load. The CUDA backend is compiled when the build image has nvcc (the default);
# on a base without CUDA (e.g. plain Debian, as in tests/docker) the CPU backend is built.
#   docker build -t flashserve .
#   docker run --gpus all -p 8000:8000 -v /path/to/model:/model flashserve --model /model
# See docs/DOCKER.md.
ARG BUILD_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

# ---- build stage ----------------------------------------------------------------------------
FROM ${BUILD_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake ninja-build g++ pkg-config \
      libsentencepiece-dev libcpp-httplib-dev nlohmann-json3-dev libgtest-dev libedit-dev nettle-dev \
      libpcre2-dev libutf8proc-dev libcli11-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Tests and benchmarks are off; only the two binaries are built. FLASHSERVE_CUDA=AUTO builds the
# CUDA backend when nvcc exists (CMAKE_CUDA_ARCHITECTURES defaults to 90a: H100/H200).
# CMAKE_ARGS: more CMake options (tests/docker passes a unity build with the JSON PCH).
ARG CUDA_ARCHITECTURES=90a
ARG CMAKE_ARGS=
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_CUDA=AUTO \
      -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} \
      -DFLASHSERVE_BUILD_TESTS=OFF -DFLASHSERVE_BUILD_BENCH=OFF ${CMAKE_ARGS} \
 && cmake --build /build --target flashserve $(test -f chat_cli/CMakeLists.txt && echo flashserve-chat)
# The runtime packages are computed, not guessed: every shared library the binaries load (ldd),
# mapped to the Debian/Ubuntu package that owns it (dpkg -S). libcuda.so.1 is not listed: the
# NVIDIA container toolkit mounts the driver's copy at run time.
RUN mkdir -p /out/bin \
 && cp /build/server/flashserve /out/bin/ \
 && if [ -f /build/chat_cli/flashserve-chat ]; then cp /build/chat_cli/flashserve-chat /out/bin/; fi \
 && for lib in $(ldd /out/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do \
      real=$(readlink -f "$lib"); \
      dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null \
        || dpkg -S "/usr$real" 2>/dev/null || echo "NOT-A-PACKAGE: $lib" >&2; \
    done | cut -d: -f1 | sort -u > /out/runtime-packages.txt \
 && echo "runtime packages:" $(cat /out/runtime-packages.txt)

# ---- runtime stage --------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /usr/share/doc/flashserve/runtime-packages.txt
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /usr/share/doc/flashserve/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin flashserve
COPY --from=build /out/bin/ /usr/local/bin/
USER flashserve
WORKDIR /tmp
EXPOSE 8000
# /health needs no API key. bash's /dev/tcp keeps curl out of the image.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
# The server is PID 1 and exits 0 on SIGTERM (docker stop). Extra arguments are appended, so a
# later --port/--host overrides these; the default CMD serves the model mounted at /model.
ENTRYPOINT ["/usr/local/bin/flashserve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--model", "/model"]
