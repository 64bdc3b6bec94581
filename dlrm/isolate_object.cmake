# Makes one copy of the dense kernels (train/CMakeLists.txt) self-contained: links INPUT into
# OUTPUT with its section groups dissolved (so that no inline function of it is merged with
# another copy's), makes every symbol but SYMBOL local, and checks the result: SYMBOL is its only
# global definition, and (unless built with sanitizers, whose instrumentation registers itself
# at start-up) it has no static constructor, code that would run on a CPU without its
# instructions.
#   cmake -DLINKER=ld -DOBJCOPY=objcopy -DNM=nm -DOBJDUMP=objdump -DINPUT=in.o -DOUTPUT=out.o
#         -DSYMBOL=name [-DSANITIZE=...] -P isolate_object.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "isolate_object: '${ARGN}' failed (${status}):\n${output}")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

run(${LINKER} -r --force-group-allocation -o ${OUTPUT}.partial ${INPUT})
run(${OBJCOPY} --keep-global-symbol=${SYMBOL} ${OUTPUT}.partial ${OUTPUT})
file(REMOVE ${OUTPUT}.partial)

run(${NM} --defined-only --extern-only ${OUTPUT})
string(REGEX REPLACE "[0-9a-f]+ [A-Za-z] " "" globals "${output}")
string(STRIP "${globals}" globals)
if(NOT globals STREQUAL SYMBOL)
  file(REMOVE ${OUTPUT})
  message(FATAL_ERROR "isolate_object: ${OUTPUT} defines global symbols other than ${SYMBOL}:\n"
                      "${output}")
endif()
if(NOT SANITIZE)
  run(${OBJDUMP} -h ${OUTPUT})
  if(output MATCHES "\\.init_array|\\.ctors")
    file(REMOVE ${OUTPUT})
    message(FATAL_ERROR "isolate_object: ${INPUT} has a static constructor, which would run on "
                        "CPUs without its instructions; dlrm/dense_kernels.cc must not have one")
  endif()
endif()
